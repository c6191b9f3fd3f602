//! The policy file's `[[gate]]` rules, as data: what each rule matches and
//! what it answers. Checked when the policy is read; compiled into the
//! built-in gate by `WorkspacePolicy::gate` (`crate::gate::rules`).

use std::fmt;
use std::marker::PhantomData;
use std::path::{Component, Path, PathBuf};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{DenyGlobs, PolicyError};

/// One `[[gate]]` rule. Rules are tried in order; the first that matches an
/// action (each command of a shell line on its own) answers for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRule {
    /// The name recorded in decisions and the audit; absent: `gate[N]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Executables: a name (matches the basename of the command word) or an
    /// absolute path; one or a list. Empty: any command.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    pub command: Vec<String>,
    /// A glob over the command's arguments joined by single spaces (`*`
    /// matches anything, spaces and `/` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// The action kinds it applies to; one or a list. Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    pub kind: Vec<GateKind>,
    /// A glob over a file operation's path, read like `deny_paths`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What a match answers.
    pub answer: GateAnswer,
    /// Why (`refuse` only; required there): told to the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What stays writable (`grant` only; required there): relative to the
    /// workspace, or absolute.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
}

/// What a gate rule answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateAnswer {
    /// The access as asked.
    Allow,
    /// No write access at all.
    ReadOnly,
    /// Write access to `paths` only, within what was asked.
    Grant,
    /// Nothing runs.
    Refuse,
}

impl GateAnswer {
    /// Whether the answer gives less than any other could: a rule that
    /// cannot tell whether it matches (a word decided at run time) answers
    /// only when it is restrictive.
    pub fn is_restrictive(self) -> bool {
        matches!(self, GateAnswer::ReadOnly | GateAnswer::Refuse)
    }
}

/// An action kind, as written in a rule's `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateKind {
    /// `shell.exec`
    #[serde(rename = "shell.exec")]
    ShellExec,
    /// `fs.write`
    #[serde(rename = "fs.write")]
    FsWrite,
    /// `fs.edit`
    #[serde(rename = "fs.edit")]
    FsEdit,
    /// `fs.multi_edit`
    #[serde(rename = "fs.multi_edit")]
    FsMultiEdit,
    /// `fs.remove`
    #[serde(rename = "fs.remove")]
    FsRemove,
    /// `fs.mkdir`
    #[serde(rename = "fs.mkdir")]
    FsMkdir,
}

impl GateKind {
    /// The kind's name, as `gate::Action::kind` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            GateKind::ShellExec => "shell.exec",
            GateKind::FsWrite => "fs.write",
            GateKind::FsEdit => "fs.edit",
            GateKind::FsMultiEdit => "fs.multi_edit",
            GateKind::FsRemove => "fs.remove",
            GateKind::FsMkdir => "fs.mkdir",
        }
    }
}

impl GateRule {
    /// The rule's name: `name`, or `gate[index]`.
    pub fn label(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("gate[{index}]"))
    }

    /// The compiled `args` glob (`*` crosses spaces and `/`).
    pub fn args_glob(&self) -> Result<Option<globset::GlobMatcher>, String> {
        self.args.as_deref().map(args_glob).transpose()
    }

    /// The compiled `path` glob.
    pub fn path_glob(&self) -> Result<Option<DenyGlobs>, String> {
        self.path.as_ref().map(|p| DenyGlobs::new(std::slice::from_ref(p))).transpose()
    }
}

fn args_glob(text: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(text)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("bad glob {text:?}: {}", e.kind()))
}

/// The name the built-in default answers under (reserved).
pub const DEFAULT_RULE: &str = "default";

/// Check the rules the way serde cannot; errors name `gate[N].key`.
pub fn validate(rules: &[GateRule]) -> Result<(), PolicyError> {
    let mut names: Vec<String> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let key = |k: &str| format!("gate[{i}].{k}");
        let bad = |k: &str, why: String| Err(PolicyError::invalid(key(k), why));
        if let Some(n) = &r.name {
            if n.trim().is_empty() {
                return bad("name", "an empty name".into());
            }
            if n == DEFAULT_RULE {
                return bad("name", format!("{DEFAULT_RULE:?} is the name of the built-in default answer"));
            }
        }
        let label = r.label(i);
        if names.contains(&label) {
            return Err(PolicyError::invalid(
                if r.name.is_some() { key("name") } else { format!("gate[{i}]") },
                format!("{label:?} names two rules; the audit could not tell them apart"),
            ));
        }
        names.push(label);
        for (j, c) in r.command.iter().enumerate() {
            let k = if r.command.len() == 1 { key("command") } else { format!("gate[{i}].command[{j}]") };
            if c.is_empty() || c.chars().any(char::is_whitespace) {
                return Err(PolicyError::invalid(k, format!("{c:?} is not an executable name")));
            }
            if c.contains('/') && !is_clean_absolute(Path::new(c)) {
                return Err(PolicyError::invalid(
                    k,
                    format!("{c:?}: give an executable's name (matches its basename) or a plain absolute path"),
                ));
            }
        }
        if let Err(why) = r.args_glob() {
            return bad("args", why);
        }
        if let Err(why) = r.path_glob() {
            return bad("path", why);
        }
        let shell_kind = r.kind.is_empty() || r.kind.contains(&GateKind::ShellExec);
        let fs_kind = r.kind.is_empty() || r.kind.iter().any(|k| *k != GateKind::ShellExec);
        if (!r.command.is_empty() || r.args.is_some()) && !shell_kind {
            return bad(
                "kind",
                "`command` and `args` match shell commands, but the rule's kind excludes shell.exec".into(),
            );
        }
        if r.path.is_some() && !fs_kind {
            return bad("kind", "`path` matches file operations, but the rule's kind is only shell.exec".into());
        }
        if r.path.is_some() && (!r.command.is_empty() || r.args.is_some()) {
            return bad(
                "path",
                "`path` matches file operations and `command`/`args` shell commands: one rule cannot match both".into(),
            );
        }
        match (r.answer, &r.reason) {
            (GateAnswer::Refuse, None) => {
                return bad("reason", "a refuse rule needs a reason (it is told to the caller)".into())
            }
            (GateAnswer::Refuse, Some(why)) if why.trim().is_empty() => return bad("reason", "an empty reason".into()),
            (GateAnswer::Refuse, Some(_)) | (_, None) => {}
            (_, Some(_)) => return bad("reason", "only a refuse rule has a reason".into()),
        }
        match r.answer {
            GateAnswer::Grant if r.paths.is_empty() => {
                return bad(
                    "paths",
                    "a grant rule needs the paths that stay writable (for none: answer = \"read-only\")".into(),
                )
            }
            GateAnswer::Grant => {}
            _ if !r.paths.is_empty() => return bad("paths", "only a grant rule has paths".into()),
            _ => {}
        }
        for (j, p) in r.paths.iter().enumerate() {
            let k = format!("gate[{i}].paths[{j}]");
            if p.as_os_str().is_empty() {
                return Err(PolicyError::invalid(k, "an empty path"));
            }
            if p.components().any(|c| c == Component::ParentDir) {
                return Err(PolicyError::invalid(
                    k,
                    format!("{}: `..` is not allowed; name the path plainly", p.display()),
                ));
            }
            if p == Path::new("/") {
                return Err(PolicyError::invalid(k, "/ is not a grant; name narrower paths"));
            }
        }
    }
    Ok(())
}

/// Absolute, with no `.` or `..` component.
fn is_clean_absolute(p: &Path) -> bool {
    p.is_absolute() && p.components().all(|c| !matches!(c, Component::CurDir | Component::ParentDir))
}

/// A value or a list of values (`command = "git"` or `command = ["git", "hg"]`).
mod one_or_many {
    use super::*;

    pub fn serialize<S: Serializer, T: Serialize>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        match v {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }

    pub fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Vec<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<T>, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(|t| vec![t])
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(t) = seq.next_element()? {
                    out.push(t);
                }
                if out.is_empty() {
                    return Err(de::Error::custom("an empty list: omit the key to match any"));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}
