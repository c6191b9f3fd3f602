mod util;

mod escapes;
mod meta;
mod sandbox;
