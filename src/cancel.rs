//! Cooperative cancellation of the work a tool call does on its thread: the MCP server
//! sets a flag when the client cancels the request, and the long loops (graph walks,
//! call-chain search, grep) look at it and stop, saying so, instead of running to their
//! own bounds.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Run `f` on this thread with `flag` as its cancellation flag.
pub fn with_flag<T>(flag: Arc<AtomicBool>, f: impl FnOnce() -> T) -> T {
    FLAG.with(|c| *c.borrow_mut() = Some(flag));
    let out = f();
    FLAG.with(|c| *c.borrow_mut() = None);
    out
}

/// Has the work on this thread been cancelled?
pub fn requested() -> bool {
    FLAG.with(|c| c.borrow().as_ref().is_some_and(|f| f.load(Ordering::Relaxed)))
}
