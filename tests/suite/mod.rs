mod util;

mod cli;
mod escapes;
mod meta;
mod policy;
mod policy_corpus;
mod policy_diff;
mod policy_fuzz;
mod sandbox;
