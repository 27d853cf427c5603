//! SWT-bench import and export (in progress).
