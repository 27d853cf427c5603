//! Test doubles shared by the test modules.

pub mod scripted_server;
