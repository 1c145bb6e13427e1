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
 * `#pragma dtrace_nif lttng PROVIDER' makes the probes that follow also
 * LTTng-UST events of PROVIDER (same fields, `__' written `_'; a numbered
 * family is one event with a `label' field), until `lttng off'. The VM
 * probes' LTTng events are OTP's own org_erlang_dyntrace tracepoints,
 * with OTP's layouts (native/dtrace_nif/lttng/org_erlang_dyntrace.h).
 */

provider erlang {
#pragma dtrace_nif lttng org_erlang_dtrace

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

	/* dtrace:span/2, span_begin/1 (not OTP's): span span_id of kind begins in proc, inside span parent_id (0: none). */
	probe span__begin(char *proc, char *user_tag, int64_t span_id, int64_t parent_id, char *kind);

	/* dtrace:span/2, span_end/1 (not OTP's): span span_id of kind ends in proc, duration_ns nanoseconds after it began. */
	probe span__end(char *proc, char *user_tag, int64_t span_id, int64_t parent_id, char *kind,
	    int64_t duration_ns);

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

#pragma dtrace_nif lttng off

	/*
	 * The VM's own probes, fed from erl_tracer events (src/vm.rs) while a
	 * tracer listens. OTP's names and argument orders; integers are
	 * int64_t; where erl_tracer does not carry OTP's value, a sentinel:
	 * -1 for an integer, "<unknown>" for an mfa, NULL for a string.
	 */

	/* procs, or alone meta tracing of the spawn BIFs: a process spawned p, which starts in mfa (m:f/arity). */
	probe process__spawn(char *p, char *mfa);

	/* procs: process p exited; reason as ~p text, at most 255 bytes. */
	probe process__exit(char *p, char *reason);

	/* running: p is scheduled in, to run mfa ("<unknown>" when the VM does not say). */
	probe process__scheduled(char *p, char *mfa);

	/* running: p is scheduled out (also when it exits: out_exited). */
	probe process__unscheduled(char *p);

	/* running: p goes to sleep in erlang:hibernate/3 (mfa; the resume mfa is not in the event), also after waking only to handle a signal. */
	probe process__hibernate(char *p, char *mfa);

	/* send: sender sent a message of size words to receiver, on this node; token fields -1. */
	probe message__send(char *sender, char *receiver, int64_t size,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* send: sender sent a message of size words to receiver on node_name; token fields -1. */
	probe message__send__remote(char *sender, char *node_name, char *receiver, int64_t size,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* 'receive': a message of size words was queued to receiver; queue_len and token fields -1. */
	probe message__queued(char *receiver, int64_t size, int64_t queue_len,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* call (dtrace:function_probes/1, [local] patterns): p calls mfa; depth -1. */
	probe local__function__entry(char *p, char *mfa, int64_t depth);

	/* call (dtrace:function_probes/1, global patterns): p calls mfa; depth -1. */
	probe global__function__entry(char *p, char *mfa, int64_t depth);

	/* call: mfa returns to p, or leaves it with an exception; depth -1. */
	probe function__return(char *p, char *mfa, int64_t depth);

	/* call: p calls the call-traced BIF mfa. */
	probe bif__entry(char *p, char *mfa);

	/* call: the call-traced BIF mfa returns to p. */
	probe bif__return(char *p, char *mfa);

	/* garbage_collection: a major collection of p starts; need in words. */
	probe gc_major__start(char *p, int64_t need);

	/* garbage_collection: a minor collection of p starts; need in words. */
	probe gc_minor__start(char *p, int64_t need);

	/* garbage_collection: a major collection of p ended; reclaimed in words. */
	probe gc_major__end(char *p, int64_t reclaimed);

	/* garbage_collection: a minor collection of p ended; reclaimed in words. */
	probe gc_minor__end(char *p, int64_t reclaimed);

	/* ports: process opened port, with the name it was opened with. */
	probe port__open(char *process, char *port_name, char *port);

	/* ports: port exited with reason; process and port_name NULL (not in the event). */
	probe port__exit(char *process, char *port, char *port_name, char *reason);

	/* 'receive' on ports: process sent port a command, close or connect; port_name NULL. */
	probe port__command(char *process, char *port, char *port_name, char *command_type);

	/* Not OTP's. procs: p and other were linked or unlinked; kind is link, unlink, getting_linked or getting_unlinked. */
	probe dtrace_process__link(char *p, char *other, char *kind);

	/* Not OTP's. procs: p registered or unregistered name; kind is register or unregister. */
	probe dtrace_process__register(char *p, char *name, char *kind);

	/* Not OTP's. ports: port and other were linked or unlinked; kind as for dtrace_process__link. */
	probe dtrace_port__link(char *port, char *other, char *kind);
};
