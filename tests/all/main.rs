//! One integration-test binary; each module is one area of the product.

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
mod localize;
mod mcp;
mod model;
mod pipeline;
mod reproduce;
mod resolution;
mod sandbox;
mod sandbox_copy;
mod search;
mod support;
mod tools;
