//! The `ghsim` binary (work in progress).

fn main() {}
