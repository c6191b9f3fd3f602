mod util;

mod cli;
mod concurrent;
mod container;
mod escapes;
mod git_guard;
mod git_protect;
mod hardlinks;
mod landlock_only;
mod links_review;
mod meta;
mod policy;
mod policy_corpus;
mod policy_diff;
mod policy_fuzz;
mod roots;
mod sandbox;
