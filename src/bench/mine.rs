//! `bench mine REPO`: cases from a git history (in progress).
