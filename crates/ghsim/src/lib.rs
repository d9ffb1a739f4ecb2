//! ghsim, a GitHub simulator (work in progress).
