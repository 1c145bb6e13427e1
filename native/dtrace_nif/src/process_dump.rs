//! The code a process runs, from its process dump (the text of
//! `erlang:process_display/2`, which the send match-spec action `{message,
//! {process_dump}}` gives each traced send): `dtrace_message__send_code`'s
//! `code`. Pure Rust, unit-tested.

use arrayvec::ArrayVec;

/// The most stack frames a code names.
pub const CODE_FRAMES: usize = 4;
/// The most bytes of a dump read for them.
pub const DUMP_BYTES: usize = 64 * 1024;
/// The longest code text (a probe's string: 255 bytes and its NUL).
pub const CODE_BYTES: usize = 255;

/// The functions of the first [`CODE_FRAMES`] stack frames of a process
/// dump (lines `0x... Return addr 0x... (m:f/a + N)`), innermost first,
/// joined by " <- ", at most [`CODE_BYTES`] bytes; `None` if it has none.
/// The frames are the functions the process will return to: the function
/// that sent when it has a frame of its own, then its callers. The dump's
/// "Program counter" line is not used: the JIT does not keep it up to date.
pub fn sender_code(dump: &[u8]) -> Option<ArrayVec<u8, CODE_BYTES>> {
    const MARK: &[u8] = b"Return addr ";
    let dump = &dump[..dump.len().min(DUMP_BYTES)];
    let mut text: ArrayVec<u8, CODE_BYTES> = ArrayVec::new();
    let put = |t: &mut ArrayVec<u8, CODE_BYTES>, part: &[u8]| {
        for &b in part {
            if t.try_push(b).is_err() {
                break;
            }
        }
    };
    let mut frames = 0;
    for line in dump.split(|&b| b == b'\n') {
        let Some(at) = line.windows(MARK.len()).position(|w| w == MARK) else { continue };
        let rest = &line[at + MARK.len()..];
        let Some(open) = rest.iter().position(|&b| b == b'(') else { continue };
        let inner = &rest[open + 1..];
        let end = inner.windows(3).position(|w| w == b" + ").or_else(|| inner.iter().position(|&b| b == b')'));
        let Some(end) = end else { continue };
        let function = &inner[..end];
        if function.is_empty() || function[0] == b'<' {
            continue;
        }
        if frames > 0 {
            put(&mut text, b" <- ");
        }
        put(&mut text, function);
        frames += 1;
        if frames == CODE_FRAMES {
            break;
        }
    }
    (frames > 0).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process dump as `{message, {process_dump}}` gives it (OTP 25's
    /// JIT; the heap lines cut): the frames' return addresses, innermost
    /// first, the catch and the stale program counter left out.
    #[test]
    fn code_from_a_process_dump() {
        let dump = b"=proc:<0.80.0>\nState: Running\nStack dump:\n\
            Program counter: 0x00007f37f1970140 (ms:'-t/0-fun-1-'/1 + 80)\n\n\
            0x00007f37f0306a30 Return addr 0x00007f37f17519cc (gen_server:do_send/2 + 124)\n\
            y(0)     Catch 0x00007f37f17519e0 (gen_server:do_send/2 + 144)\n\n\
            0x00007f37f0306a40 Return addr 0x00007f37f196fc4c (ms:sender/1 + 244)\n\n\
            0x00007f37f0306a48 Return addr 0x00007f37f1600c30 (<terminate process normally>)\n\
            Internal State: ACT_PRIO_NORMAL\n";
        assert_eq!(sender_code(dump).as_deref(), Some(&b"gen_server:do_send/2 <- ms:sender/1"[..]));
        assert_eq!(sender_code(b"=proc:<0.1.0>\nStack dump:\n"), None);
    }

    /// At most four frames, and never more than a text holds.
    #[test]
    fn code_is_bounded() {
        let mut dump = Vec::new();
        for i in 0..100 {
            dump.extend_from_slice(format!("0x1 Return addr 0x2 (a_rather_long_module_name_{i}:f/1 + 8)\n").as_bytes());
        }
        let code = sender_code(&dump).expect("frames");
        assert_eq!(code.split(|&b| b == b'<').count(), 4);
        assert!(code.len() <= CODE_BYTES);
    }
}
