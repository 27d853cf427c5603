//! One integration-test binary; each module is one area of the product.

mod bench;
mod bench_mine;
mod bounds;
mod cli;
mod common;
mod conventions;
mod environment;
mod fixtures;
mod index;
mod interrupt;
mod localize;
mod mcp;
mod model;
mod pipeline;
mod reproduce;
mod sandbox;
mod search;
mod support;
mod tools;
