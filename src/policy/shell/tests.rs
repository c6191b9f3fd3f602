//! Unit tests of the checker's library surface; the table-driven corpus
//! is in tests/suite/policy_corpus.rs.

use std::sync::Arc;

use super::*;
use crate::policy::{ShellPolicy, WorkspacePolicy};

fn policy(shell: ShellPolicy) -> WorkspacePolicy {
    WorkspacePolicy { workspace: Some(std::env::temp_dir()), shell: Some(shell), ..WorkspacePolicy::default() }
}

fn verdict(p: &WorkspacePolicy, line: &str) -> Verdict {
    match check_shell_command(p, line) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_predicate_sees_every_command_and_can_refuse_with_a_reason() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(Vec<String>, Vec<String>)>::new()));
    let s2 = seen.clone();
    let p = policy(ShellPolicy {
        interpreter: Interpreter::Sh,
        predicate: Some(Arc::new(move |argv: &[String], ctx: &CommandCtx<'_>| {
            if let Ok(mut v) = s2.lock() {
                v.push((argv.to_vec(), ctx.via.to_vec()));
            }
            if argv.first().map(String::as_str) == Some("git") && argv.get(1).map(String::as_str) == Some("push") {
                PredicateDecision::Deny(Some("CI pushes.".into()))
            } else {
                PredicateDecision::Allow
            }
        })),
        ..ShellPolicy::default()
    });
    assert!(verdict(&p, "git status && timeout 5 git log").plan().is_some());
    let r = verdict(&p, "nice -n 5 git push");
    let r = r.refusal().cloned();
    assert_eq!(r.as_ref().map(|r| r.reason), Some(RefusalReason::NotAllowed));
    assert!(r.is_some_and(|r| r.message.contains("CI pushes.")));
    let seen = seen.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(seen.contains(&(vec!["git".into(), "log".into()], vec!["timeout".into()])), "{seen:?}");
    assert!(seen.contains(&(vec!["git".into(), "push".into()], vec!["nice".into()])), "{seen:?}");
}

#[test]
fn no_shell_section_runs_nothing() {
    let p = WorkspacePolicy { workspace: Some(std::env::temp_dir()), ..WorkspacePolicy::default() };
    let v = verdict(&p, "ls");
    assert_eq!(v.refusal().map(|r| r.reason), Some(RefusalReason::NotAllowed));
}

#[test]
fn runners_pass_only_without_rules_or_when_named() {
    let open = policy(ShellPolicy::default());
    assert!(verdict(&open, "sh -c 'anything'").plan().is_some(), "no rules in force: nothing to protect");
    let deny = policy(ShellPolicy { deny: vec!["rm".into()], ..ShellPolicy::default() });
    assert_eq!(verdict(&deny, "sh -c 'rm -rf x'").refusal().map(|r| r.reason), Some(RefusalReason::NestedCommand));
    assert_eq!(verdict(&deny, "xargs rm").refusal().map(|r| r.reason), Some(RefusalReason::NestedCommand));
    let named =
        policy(ShellPolicy { allow: Some(vec!["bash".into()]), deny: vec!["rm".into()], ..ShellPolicy::default() });
    assert!(verdict(&named, "bash -c 'make'").plan().is_some());
}

#[test]
fn verdicts_serialise_with_kebab_case_reasons() {
    let p = policy(ShellPolicy { deny: vec!["rm".into()], ..ShellPolicy::default() });
    let json = serde_json::to_string(&verdict(&p, "rm -rf /")).unwrap_or_default();
    assert!(json.contains("\"verdict\":\"refused\"") && json.contains("\"denied-executable\""), "{json}");
    let back: Result<Verdict, _> = serde_json::from_str(&json);
    assert_eq!(back.ok(), Some(verdict(&p, "rm -rf /")));
}

fn reason(p: &WorkspacePolicy, line: &str) -> Option<RefusalReason> {
    verdict(p, line).refusal().map(|r| r.reason)
}

#[test]
fn sh_builtins_that_reshape_the_line_are_refused_even_when_allowed() {
    let p = policy(ShellPolicy { interpreter: Interpreter::Sh, ..ShellPolicy::default() });
    for line in ["alias ls=rm", "hash -p /bin/rm ls", "enable -f x.so y", "shopt -s expand_aliases", "pushd src"] {
        assert_eq!(reason(&p, line), Some(RefusalReason::UnsupportedSyntax), "{line}");
    }
    for line in ["export LD_PRELOAD=x", "readonly IFS", "declare -x BASH_ENV=y", "read -r PATH"] {
        assert_eq!(reason(&p, line), Some(RefusalReason::UnsupportedSyntax), "{line}");
    }
    assert!(verdict(&p, "export FOO=1; read -r line < /dev/null").plan().is_some());
}

#[test]
fn regex_patterns_meet_words_decided_at_run_time() {
    let p = match crate::policy::WorkspacePolicy::from_toml(&format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\ndeny_patterns = [{{ regex = '^git reset --hard\\b' }}, {{ regex = 'secret' }}]\n",
        std::env::temp_dir()
    )) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    // The literal start contradicts the anchored pattern: checkable.
    assert!(
        verdict(&p, "git commit -m \"$(date)\" && echo $HOME-ish").refusal().is_some(),
        "unanchored 'secret' may match"
    );
    let anchored_only = match crate::policy::WorkspacePolicy::from_toml(&format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\ndeny_patterns = [{{ regex = '^git reset --hard\\b' }}]\n",
        std::env::temp_dir()
    )) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    assert!(verdict(&anchored_only, "git commit -m \"$(date)\"").plan().is_some());
    assert!(verdict(&anchored_only, "echo $HOME").plan().is_some());
    assert_eq!(reason(&anchored_only, "git reset $MODE"), Some(RefusalReason::DeniedPattern));
    assert_eq!(reason(&anchored_only, "git $SUB --hard"), Some(RefusalReason::DeniedPattern));
    assert_eq!(reason(&anchored_only, "git reset --hard"), Some(RefusalReason::DeniedPattern));
    assert!(verdict(&anchored_only, "git resettle $X").plan().is_some(), "`resettle` contradicts `reset --hard`");
}

#[test]
fn a_line_too_long_or_with_nul_is_refused_not_parsed() {
    let p = policy(ShellPolicy { interpreter: Interpreter::Sh, ..ShellPolicy::default() });
    assert_eq!(reason(&p, &"a".repeat(MAX_LINE + 1)), Some(RefusalReason::UnsupportedSyntax));
    assert_eq!(reason(&p, "ls\0rm"), Some(RefusalReason::UnsupportedSyntax));
    let deep = format!("{}x{}", "$(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(reason(&p, &format!("echo {deep}")), Some(RefusalReason::UnsupportedSyntax));
}

#[test]
fn cd_through_a_wrapper_and_jobs_x_are_refused_under_a_deny_only_policy() {
    let p = policy(ShellPolicy { interpreter: Interpreter::Sh, deny: vec!["curl".into()], ..ShellPolicy::default() });
    for line in ["command cd /tmp; echo x > f", "builtin cd src", "time cd src", "nice cd src"] {
        assert_eq!(reason(&p, line), Some(RefusalReason::UnsupportedSyntax), "{line}");
    }
    assert_eq!(reason(&p, "jobs -x curl x"), Some(RefusalReason::NestedCommand));
    assert_eq!(reason(&p, "time PATH=/tmp/x curl"), Some(RefusalReason::UnsupportedSyntax));
    assert!(verdict(&p, "time -p ls").plan().is_some());
}

#[test]
fn getopts_option_strings_may_not_start_with_a_dash() {
    let p = policy(ShellPolicy { interpreter: Interpreter::Sh, deny: vec!["curl".into()], ..ShellPolicy::default() });
    assert_eq!(reason(&p, "getopts -- CDPATH; cd src"), Some(RefusalReason::UnsupportedSyntax));
    assert_eq!(reason(&p, "getopts ab: PATH"), Some(RefusalReason::UnsupportedSyntax));
    assert!(verdict(&p, "getopts ab: opt").plan().is_some());
}
