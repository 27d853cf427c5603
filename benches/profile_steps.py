#!/usr/bin/env python3
"""Where an `index` run's CPU samples go, from `perf script` output with call chains.

    perf script -i perf.data -F comm,tid,ip,sym | python3 benches/profile_steps.py

Each sample is put in the first step (below) one of its frames names, so each sample is
counted once and the shares add up to 100%. Also prints the samples per thread name
(tantivy's indexing thread is `thrd-tantivy-in`) and, with `--top STEP`, the leaf
functions of one step.
"""
import argparse
import collections
import sys

# (step, substrings of a frame's symbol, or with a leading ^ its start): the first step
# with a matching frame wins, so the inner steps come before the ones that call them.
STEPS = [
    ("tree-sitter parse", ["ts_parser_parse"]),
    ("extract: Python bindings walk", ["extract::python::bindings"]),
    ("extract: queries", ["ts_query_cursor", "QueryCursor", "query_tags"]),
    ("extract: the rest", ["extract::build_facts", "Extractor::extract_bytes"]),
    ("stored facts decoded", ["load_facts", "bincode::de"]),
    ("read and hash a file", ["extract_or_reuse", "blake3"]),
    ("walk", ["index::walk", "ignore::walk"]),
    ("keyword documents read again", ["docs_from_disk"]),
    ("keyword: tantivy finalize", ["SegmentWriter::finalize", "SegmentSerializer"]),
    ("keyword: tokenizer", ["search::tokenizer"]),
    ("keyword: tantivy add_document", ["tantivy"]),
    ("resolve: affected files", ["resolve::affected", "resolve_affected"]),
    ("resolve: test_of", ["test_of", "test_reach"]),
    ("resolve", ["resolve::resolve", "^reproagent::resolve::", "^resolve_"]),
    ("graph: rows of files", ["rows_of_files"]),
    ("graph: diff and apply", ["store::diff", "Store::apply", "store::engine::apply"]),
    ("graph: write (table blocks, LZ4)", ["store::table", "lz4_flex"]),
    ("graph: write (encode, sort)", ["store::encode"]),
    ("graph: write (other)", ["store::write_full", "store::write_table"]),
    ("graph: Cozo queries", ["cozo::"]),
    ("memory freed", ["drop_in_place", "_int_free", "__GI___libc_free"]),
    ("page faults and kernel", ["asm_exc_page_fault", "entry_SYSCALL", "[unknown]"]),
]


def samples(lines):
    """(thread name, [symbols, leaf first]) per sample."""
    head, frames = None, []
    for line in lines:
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
        elif line[0] not in " \t":
            head, frames = line.split()[0], []
        else:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
    if head is not None:
        yield head, frames


def matches(frame, key):
    return frame.startswith(key[1:]) if key.startswith("^") else key in frame


def step_of(frames):
    for step, keys in STEPS:
        if any(matches(f, k) for f in frames for k in keys):
            return step
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", help="list the leaf functions of this step")
    args = ap.parse_args()
    by_step, by_thread, leaves = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for thread, frames in samples(sys.stdin):
        total += 1
        step = step_of(frames)
        by_step[step] += 1
        by_thread[thread] += 1
        if args.top and step == args.top and frames:
            leaves[frames[0][:100]] += 1
    if total == 0:
        print("no samples (was perf script given -F comm,tid,ip,sym and a call-graph record?)")
        return
    print(f"{total} samples")
    for step, n in by_step.most_common():
        print(f"{100 * n / total:6.1f}%  {step}")
    print("by thread: " + ", ".join(f"{t} {100 * n / total:.0f}%" for t, n in by_thread.most_common(6)))
    if args.top:
        print(f"leaf functions of '{args.top}':")
        for leaf, n in leaves.most_common(15):
            print(f"{100 * n / total:6.1f}%  {leaf}")


if __name__ == "__main__":
    main()
