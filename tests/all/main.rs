//! One integration-test binary; each module is one area of the product.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

mod bench;
mod bench_mine;
mod bounds;
mod cli;
mod common;
mod confine;
mod conventions;
mod environment;
mod fixtures;
mod index;
mod interrupt;
mod keyfree_body;
mod keyfree_multifile;
mod layering;
mod localize;
mod mcp;
mod model;
mod pipeline;
mod reproduce;
mod resolution;
mod sandbox;
mod sandbox_copy;
mod search;
mod store;
mod support;
mod tools;
