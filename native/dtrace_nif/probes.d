/*
 * The probe catalogue of dtrace_nif: every SDT probe the library carries,
 * declared once, in the D provider syntax of OTP's
 * erts/emulator/beam/erlang_dtrace.d. Names and argument orders are OTP's.
 *
 * build.rs reads this file (through the dtrace_catalogue crate) and
 * generates from it the semaphores, the probe sites with their
 * .note.stapsdt notes, the is-enabled and fire functions of both backends,
 * and the machine-readable catalogue (priv/dtrace_probes.json). The README's
 * probe table is generated from it too (make readme-probes); a test checks
 * that it matches.
 *
 * Argument k of every probe sits in the same register (README, "Argument
 * registers"); a probe takes at most 12 arguments. Types: char * (a
 * NUL-terminated string or NULL), int64_t, int (32-bit), uint64_t,
 * uint32_t. OTP declared its user-probe integers `int' and truncated them;
 * here they are int64_t.
 *
 * A comment right before a probe is its description (README, rustdoc).
 * `#pragma dtrace_nif numbered NAME FIRST LAST' makes the next probe a
 * family NAME<FIRST> .. NAME<LAST> with one layout.
 */

provider erlang {
	/* dtrace:user_trace_s1/1: one string (deprecated in OTP, kept). */
	probe user_trace__s1(char *message);

	/* dtrace:p/0..8: the caller, its user tag, i1..i4, s1..s4. */
	probe user_trace__i4s4(char *proc, char *user_tag,
	    int64_t i1, int64_t i2, int64_t i3, int64_t i4,
	    char *s1, char *s2, char *s3, char *s4);

	/* dtrace:pn/1..9, label 0..950: the arguments of user_trace__i4s4. */
#pragma dtrace_nif numbered user_trace__n 0 950
	probe user_trace__n(char *proc, char *user_tag,
	    int64_t i1, int64_t i2, int64_t i3, int64_t i4,
	    char *s1, char *s2, char *s3, char *s4);

	/* dtrace_file: a file operation {thread_id, tag} starts (OTP 20's efile_drv). */
	probe efile_drv__entry(int thread_id, int tag, char *user_tag, int command,
	    char *s1, char *s2, int64_t i1, int64_t i2, int64_t i3, int64_t i4,
	    char *port);

	/* dtrace_file: the I/O of operation {thread_id, tag} starts. */
	probe efile_drv__int_entry(int thread_id, int tag, int command);

	/* dtrace_file: the I/O of operation {thread_id, tag} ends. */
	probe efile_drv__int_return(int thread_id, int tag, int command);

	/* dtrace_file: operation {thread_id, tag} ends; success 1/0, errno. */
	probe efile_drv__return(int thread_id, int tag, char *user_tag, int command,
	    int success, int errno);
};
