//! The one integration-test binary; each module is one area.

mod sandbox;
