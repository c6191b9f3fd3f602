mod util;

mod cli;
mod concurrent;
mod container;
mod escapes;
mod git_guard;
mod git_protect;
mod git_review;
mod hardlinks;
mod landlock_only;
mod meta;
mod policy;
mod policy_corpus;
mod policy_diff;
mod policy_fuzz;
mod sandbox;
