//! One integration-test binary; each module is one area of the product.

mod common;
mod fixtures;
mod index;
