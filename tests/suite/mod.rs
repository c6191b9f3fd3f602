mod util;

mod escapes;
mod meta;
mod policy;
mod policy_corpus;
mod policy_diff;
mod policy_fuzz;
mod sandbox;
mod stdin;
