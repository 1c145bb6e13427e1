//! Garbage collections (the `garbage_collection` flag).

use rustler::{Atom, Term};

use std::cell::Cell;

use rustler::sys::ErlNifTerm;

use super::event::{Event, TraceTag, UNAVAILABLE};
use crate::probes::org_erlang_dyntrace::{gc_major_end, gc_major_start, gc_minor_end, gc_minor_start};
use crate::probes::{
    gc_major__end, gc_major__start, gc_minor__end, gc_minor__start, process__heap_grow, process__heap_shrink,
};
use crate::text::TextBuf;

mod atoms {
    rustler::atoms! { wordsize, heap_block_size, old_heap_block_size }
}

/// `gc_minor_start`, `gc_major_start`, `gc_minor_end`, `gc_major_end`:
/// TraceTerm is the collection's list of `{Key, Value}` figures; `wordsize`
/// is the words needed (start) or reclaimed (end). OTP's LTTng events also
/// carry the heap and old heap block sizes.
pub(crate) fn gc(e: &Event<'_>, tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    let figures = GcFigures::of(e.term);
    let words = figures.wordsize.map_or(UNAVAILABLE, |w| w as i64);
    let (heap, old_heap) = (figures.heap_block_size.unwrap_or(0), figures.old_heap_block_size.unwrap_or(0));
    let otp_words = figures.wordsize.unwrap_or(0);
    match tag {
        TraceTag::GcMinorStart => {
            gc_minor__start::fire(pid, words);
            gc_minor_start::fire(pid, otp_words, heap, old_heap);
        }
        TraceTag::GcMinorEnd => {
            gc_minor__end::fire(pid, words);
            gc_minor_end::fire(pid, otp_words, heap, old_heap);
        }
        TraceTag::GcMajorStart => {
            gc_major__start::fire(pid, words);
            gc_major_start::fire(pid, otp_words, heap, old_heap);
        }
        TraceTag::GcMajorEnd => {
            gc_major__end::fire(pid, words);
            gc_major_end::fire(pid, otp_words, heap, old_heap);
        }
        _ => {}
    }
}

thread_local! {
    /// The collection under way on this scheduler thread: the process (its
    /// pid, an immediate, as a raw term) and its heap block size at the
    /// start. The VM delivers a collection's start and end events on the
    /// thread that runs it, one collection at a time.
    static HEAP_AT_START: Cell<Option<(ErlNifTerm, u64)>> = const { Cell::new(None) };
}

/// `gc_*_start`, `gc_*_end` for `process__heap_grow` and
/// `process__heap_shrink`: the heap block size (words) at the start is
/// kept; at the end, if it changed, grow or shrink fires with both. OTP
/// fires from inside the collection at each resize; here once per
/// collection, with the net change.
pub(crate) fn heap_size(e: &Event<'_>, tag: TraceTag) {
    let size = GcFigures::of(e.term).heap_block_size;
    let me = e.tracee.as_c_arg();
    match tag {
        TraceTag::GcMinorStart | TraceTag::GcMajorStart => {
            HEAP_AT_START.with(|c| c.set(size.map(|s| (me, s))));
        }
        TraceTag::GcMinorEnd | TraceTag::GcMajorEnd => {
            let start = HEAP_AT_START.with(|c| c.take());
            let (Some((pid, old)), Some(new)) = (start, size) else { return };
            if pid != me || old == new {
                return;
            }
            let mut p = TextBuf::new();
            let p = e.tracee(&mut p);
            let (old, new) = (old as i64, new as i64);
            if new > old {
                process__heap_grow::fire(p, old, new);
            } else {
                process__heap_shrink::fire(p, old, new);
            }
        }
        _ => {}
    }
}

/// The words needed (start) or reclaimed (end) of a GC event's list.
pub(super) fn wordsize(list: Term<'_>) -> Option<u64> {
    GcFigures::of(list).wordsize
}

/// The figures of a GC event's list the probes carry (the one parser of
/// that list): each `None` when absent.
#[derive(Default)]
struct GcFigures {
    wordsize: Option<u64>,
    heap_block_size: Option<u64>,
    old_heap_block_size: Option<u64>,
}

impl GcFigures {
    /// Reads the first 32 pairs of the list (OTP 25 and 27 give 12, with
    /// `wordsize` first).
    fn of(list: Term<'_>) -> Self {
        let mut figures = GcFigures::default();
        let mut cell = list;
        for _ in 0..32 {
            let Ok((head, tail)) = cell.list_get_cell() else { break };
            if let Ok((k, v)) = head.decode::<(Atom, u64)>() {
                if k == atoms::wordsize() {
                    figures.wordsize = Some(v);
                } else if k == atoms::heap_block_size() {
                    figures.heap_block_size = Some(v);
                } else if k == atoms::old_heap_block_size() {
                    figures.old_heap_block_size = Some(v);
                }
            }
            cell = tail;
        }
        figures
    }
}
