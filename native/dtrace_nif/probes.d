/*
 * The probe catalogue of dtrace_nif: every probe and event the library
 * carries, and how the VM's events feed them, declared once, in the D
 * provider syntax of OTP's erts/emulator/beam/erlang_dtrace.d. Names and
 * argument orders are OTP's.
 *
 * build.rs reads this file (through the dtrace_catalogue crate) and
 * generates from it the semaphores, the probe sites with their
 * .note.stapsdt notes, the LTTng-UST events (header, call sites), one API
 * per probe (is it enabled in any sink, fire to every sink that listens),
 * the erl_tracer dispatch of the VM probes, and the machine-readable
 * catalogue (priv/dtrace_probes.json). `make generated' writes the tables
 * of docs/reference.md and the efile command tables of src/api/, priv/bpftrace/efile.bt
 * and priv/dtrace/efile_drv.d from it; `cargo test' checks that they match.
 *
 * Argument k of every probe sits in the same register (docs/reference.md,
 * "Argument registers"); a probe takes at most 12 arguments. Types: char *
 * (a NUL-terminated string or NULL), int64_t, int (32-bit), uint64_t,
 * uint32_t (`unsigned int'), `unsigned long' (64-bit). OTP declared its
 * user-probe integers `int' and truncated them; here they are int64_t.
 *
 * A comment right before a probe is its description (docs, rustdoc).
 * `#pragma dtrace_nif numbered NAME FIRST LAST' makes the next probe a
 * family NAME<FIRST> .. NAME<LAST> with one layout.
 * `#pragma dtrace_nif lttng PROVIDER' makes the probes that follow also
 * LTTng-UST events of PROVIDER (same fields, `__' written `_'; a numbered
 * family is one event with a `label' field), until `lttng off'.
 * `#pragma dtrace_nif lttng-only', first in a provider block, makes it a
 * provider of LTTng-UST events only, with no SDT probe.
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

	/* dtrace:span/2, span_end/1,2 (not OTP's): span span_id of kind ends in proc, duration_ns nanoseconds after it began; outcome is how it ended: "ok", or "error", "exit" or "throw" (the class of the exception span/2's fun raised, or span_end/2's). */
	probe span__end(char *proc, char *user_tag, int64_t span_id, int64_t parent_id, char *kind,
	    int64_t duration_ns, char *outcome);

	/* dtrace:span/2, span_end/1,2 (not OTP's): span span_end's arguments, fired only when duration_ns is at least the node's slow-span threshold (dtrace:slow_span_threshold/0, default 1 ms); while only it listens a span costs two clock reads and no event, and span_id, parent_id are 0. */
	probe span__slow(char *proc, char *user_tag, int64_t span_id, int64_t parent_id, char *kind,
	    int64_t duration_ns, char *outcome);

	/*
	 * A process inside a span, for "why was it slow" (not OTP's): while a
	 * tracer listens to one of these, dtrace:span/2 (span_begin/1) gives
	 * the outermost span's process the trace flags of its feed rows (on=
	 * spans) until the span ends; no other process is traced for them.
	 */

	/* In a span: proc is scheduled in ("in") to run mfa, or out ("out") in mfa; "<unknown>" when the VM does not say. */
	probe span__vm_scheduled(char *proc, char *mfa, char *type);

	/* In a span: a collection of proc starts or ends (type gc_minor_start, gc_minor_end, gc_major_start, gc_major_end); words needed (start) or reclaimed (end). */
	probe span__vm_gc(char *proc, char *type, int64_t words);

	/* In a span: proc sent a message of size words to receiver (a pid, a port, a registered name, or a process of another node). */
	probe span__vm_send(char *proc, char *receiver, int64_t size);

	/* In a span: a message of size words was queued to proc. */
	probe span__vm_receive(char *proc, int64_t size);

	/* dtrace_file: file operation {thread_id, tag} starts (OTP 20's efile_drv; tag counts the scheduler's operations). */
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
	 * The VM's own probes, fed from erl_tracer events while a tracer
	 * listens (the feed table below says which events feed which probe).
	 * OTP's names and argument orders; integers are int64_t; where
	 * erl_tracer does not carry OTP's value, a sentinel: -1 for an
	 * integer, 0 for the sequential-trace token fields (OTP's value
	 * without a token), "<unknown>" for an mfa, "" for a string (never
	 * NULL where OTP passes a string).
	 */

	/* procs, or alone meta tracing of the spawn BIFs: a process spawned p, which starts in mfa (m:f/arity). */
#pragma dtrace_nif otp_vm erl_process.c:erl_create_process
	probe process__spawn(char *p, char *mfa);

	/* exit_meta (meta tracing of erlang:exit/2, and exit/3 and exit_signal/2,3 where the VM has them; no trace flag): sender sent an exit signal with reason (~p text; kill as killed) to the live local process receiver; exits along links have no event. */
#pragma dtrace_nif otp_vm erl_proc_sig_queue.c:sig_enqueue_trace
	probe process__exit_signal(char *sender, char *receiver, char *reason);

	/* procs: process p exited; reason as ~p text, at most 255 bytes. */
#pragma dtrace_nif otp_vm erl_process.c:erts_do_exit_process
	probe process__exit(char *p, char *reason);

	/* running: p is scheduled in, to run mfa ("<unknown>" when the VM does not say). */
#pragma dtrace_nif otp_vm beam_common.c:erts_dirty_process_main
	probe process__scheduled(char *p, char *mfa);

	/* running: p is scheduled out (also when it exits: out_exited). */
#pragma dtrace_nif otp_vm erl_process.c:erts_schedule
	probe process__unscheduled(char *p);

	/* running: p goes to sleep in erlang:hibernate/3, or through erlang:hibernate/0 in gen_server's or gen_statem's loop (mfa: erlang:hibernate/3, or that loop function), also after waking only to handle a signal. */
#pragma dtrace_nif otp_vm beam_common.c:erts_hibernate
	probe process__hibernate(char *p, char *mfa);

	/* send: sender sent a message of size words to receiver, on this node; token fields 0 (no token). */
#pragma dtrace_nif otp_vm erl_message.c:erts_send_message
	probe message__send(char *sender, char *receiver, int64_t size,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* send: sender sent a message of size words to receiver on node_name; token fields 0 (no token). */
#pragma dtrace_nif otp_vm dist.c:erts_dsig_send_msg
	probe message__send__remote(char *sender, char *node_name, char *receiver, int64_t size,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* 'receive': a message of size words was queued to receiver; queue_len -1, token fields 0 (no token). */
#pragma dtrace_nif otp_vm erl_proc_sig_queue.c:handle_message_enqueued_tracing
	probe message__queued(char *receiver, int64_t size, int64_t queue_len,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* call (dtrace:function_probes/1, [local] patterns): p calls mfa; depth -1. */
#pragma dtrace_nif otp_vm beam_common.h:DTRACE_LOCAL_CALL
	probe local__function__entry(char *p, char *mfa, int64_t depth);

	/* call (dtrace:function_probes/1, global patterns): p calls mfa; depth -1. */
#pragma dtrace_nif otp_vm beam_common.h:DTRACE_GLOBAL_CALL
	probe global__function__entry(char *p, char *mfa, int64_t depth);

	/* call: mfa returns to p, or leaves it with an exception; depth -1. */
#pragma dtrace_nif otp_vm beam_common.h:DTRACE_RETURN
	probe function__return(char *p, char *mfa, int64_t depth);

	/* call: p calls the call-traced BIF mfa. */
#pragma dtrace_nif otp_vm beam_common.h:DTRACE_BIF_ENTRY
	probe bif__entry(char *p, char *mfa);

	/* call: the call-traced BIF mfa returns to p. */
#pragma dtrace_nif otp_vm beam_common.h:DTRACE_BIF_RETURN
	probe bif__return(char *p, char *mfa);

	/* call (dtrace:function_probes/1 patterns that cover NIFs, Module:module_info(nifs)): p calls the NIF mfa (OTP's JIT fires it for dirty NIFs only; here for every traced call). */
#pragma dtrace_nif otp_vm beam_common.c:erts_dirty_process_main
	probe nif__entry(char *p, char *mfa);

	/* call: the NIF mfa returns to p, or raised. */
#pragma dtrace_nif otp_vm beam_common.c:erts_dirty_process_main
	probe nif__return(char *p, char *mfa);

	/* garbage_collection: a major collection of p starts; need in words. */
#pragma dtrace_nif otp_vm erl_gc.c:garbage_collect
	probe gc_major__start(char *p, int64_t need);

	/* garbage_collection: a minor collection of p starts; need in words. */
#pragma dtrace_nif otp_vm erl_gc.c:garbage_collect
	probe gc_minor__start(char *p, int64_t need);

	/* garbage_collection: a major collection of p ended; reclaimed in words. */
#pragma dtrace_nif otp_vm erl_gc.c:garbage_collect
	probe gc_major__end(char *p, int64_t reclaimed);

	/* garbage_collection: a minor collection of p ended; reclaimed in words. */
#pragma dtrace_nif otp_vm erl_gc.c:garbage_collect
	probe gc_minor__end(char *p, int64_t reclaimed);

	/* ports: process opened port, with the name it was opened with. */
#pragma dtrace_nif otp_vm erl_bif_port.c:open_port
	probe port__open(char *process, char *port_name, char *port);

	/* ports: port exited with reason; process: the one connected to it (kept from its open event and connects; OTP passes the process that closed it, most often that one), port_name: the name it was opened with (the port itself and "" when unknown). */
#pragma dtrace_nif otp_vm io.c:erts_deliver_port_exit
	probe port__exit(char *process, char *port, char *port_name, char *reason);

	/* 'receive' on ports: process sent port a command, close or connect; port_name: the name it was opened with ("" when unknown). */
#pragma dtrace_nif otp_vm io.c:erts_port_output
	probe port__command(char *process, char *port, char *port_name, char *command_type);

	/* 'receive' on ports: process called erlang:port_control(port, command_no, Data) (the port's driver control callback); port_name as for port__command. */
#pragma dtrace_nif otp_vm io.c:call_driver_control
	probe port__control(char *process, char *port, char *port_name, int64_t command_no);

	/* 'receive' on ports: port, owned by process, was connected to new_process (erlang:port_connect/2, and also Port ! {Pid, {connect, New}}, which OTP reports as port__command only); process: the owner kept from the port's open event and earlier connects, else the caller. */
#pragma dtrace_nif otp_vm io.c:set_port_connected
	probe port__connect(char *process, char *port, char *port_name, char *new_process);

	/* system_monitor busy_port, while no one else holds the node's system monitor (src/vm/dtrace_vm.erl): a process was suspended sending to the busy port; once per suspended sender, where OTP fires once as the driver sets the port busy. */
#pragma dtrace_nif otp_vm io.c:set_busy_port
	probe port__busy(char *port);

	/* node_monitor (net_kernel:monitor_nodes/2, every node type, with reasons): node (this node) saw monitored_node come up or go down; what nodeup or nodedown, type visible or hidden, reason [] on nodeup (~p texts). Fired as the subscriber gets the message, just after OTP's site. */
#pragma dtrace_nif otp_vm dist.c:send_nodes_mon_msgs
	probe dist__monitor(char *node, char *what, char *monitored_node, char *type, char *reason);

	/* system_monitor busy_dist_port, while no one else holds the node's system monitor: pid was suspended sending through the busy distribution port of remote_node (erlang:system_info(dist_ctrl); "" when not found); node is this node. */
#pragma dtrace_nif otp_vm dist.c:erts_dsig_send
	probe dist__port_busy(char *node, char *port, char *remote_node, char *pid);

	/* garbage_collection: p's heap grew from old_size to new_size words in a collection (heap_block_size at its start and end; OTP also fires heap_grow for some shrinks, and may fire twice in one collection: here once, by the net change). */
#pragma dtrace_nif otp_vm erl_gc.c:do_minor
	probe process__heap_grow(char *p, int64_t old_size, int64_t new_size);

	/* garbage_collection: p's heap shrank from old_size to new_size words in a collection (as process__heap_grow). */
#pragma dtrace_nif otp_vm erl_gc.c:shrink_new_heap
	probe process__heap_shrink(char *p, int64_t old_size, int64_t new_size);

	/* 'receive' on ports: process gave port data of bytes bytes in one binary (port_command/2, Port ! {Pid, {command, Bin}}); node is the caller, as in OTP's call site. */
#pragma dtrace_nif otp_vm io.c:call_driver_output
	probe driver__output(char *node, char *port, char *port_name, int64_t bytes);

	/* 'receive' on ports: as driver__output for data in an iolist (the event's list of binaries: bytes is their sum). */
#pragma dtrace_nif otp_vm io.c:call_driver_outputv
	probe driver__outputv(char *node, char *port, char *port_name, int64_t bytes);

	/* 'receive' on ports: erlang:port_control/3 with command and bytes bytes of data. */
#pragma dtrace_nif otp_vm io.c:call_driver_control
	probe driver__control(char *node, char *port, char *port_name, int64_t command, int64_t bytes);

	/* 'receive' on ports: erlang:port_call/3 with command and bytes bytes of data (the external term format). */
#pragma dtrace_nif otp_vm io.c:call_driver_call
	probe driver__call(char *node, char *port, char *port_name, int64_t command, int64_t bytes);

	/* 'receive' on ports: the driver's timer (driver_set_timer) fired; node: the port's owner as kept from its open event. */
#pragma dtrace_nif otp_vm erl_port_task.c:erts_port_task_execute
	probe driver__timeout(char *node, char *port, char *port_name);

	/*
	 * OTP's VM probes that no event of a stock VM feeds: declared so that
	 * OTP's scripts that name them (messages.d, memory1.d, dist.d,
	 * port1.d, driver1.d) run as they are; they never fire. The reason
	 * and OTP's site are in each one's pragma, and docs/reference.md's
	 * table of OTP's VM probes.
	 */

	/* Never fires: a receive removing a message has no trace event. */
#pragma dtrace_nif otp_vm beam_jit_common.cpp:beam_jit_remove_message not_fed trace 'receive' is at enqueue (message__queued); no event when a receive takes a message off the queue
	probe message__receive(char *receiver, int64_t size, int64_t queue_len,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* Never fires: copying a term has no trace event. */
#pragma dtrace_nif otp_vm copy.c:copy_struct_x not_fed no event for copying a term
	probe copy__struct(int64_t size);

	/* Never fires: copying a term has no trace event. */
#pragma dtrace_nif otp_vm copy.c:copy_object_x not_fed no event for copying a term
	probe copy__object(char *proc, int64_t size);




	/* Never fires: exits sent along links to other nodes have no event. */
#pragma dtrace_nif otp_vm dist.c:erts_dsig_send_exit_tt not_fed no event for an exit signal sent along a link to another node
	probe process__exit_signal__remote(char *sender, char *node_name, char *receiver, char *reason,
	    int64_t token_label, int64_t token_previous, int64_t token_current);

	/* Never fires: a port resuming its blocked callers has no event. */
#pragma dtrace_nif otp_vm io.c:erts_port_resume_procs not_fed no event when a port resumes the processes it blocked (OTP's own loop there never advances)
	probe process__port_unblocked(char *p, char *port);

	/* Never fires: writes to a distribution port have no event. */
#pragma dtrace_nif otp_vm dist.c:dist_port_command not_fed no event for a write to a distribution port (only cumulative counters)
	probe dist__output(char *node, char *port, char *remote_node, int64_t bytes);

	/* Never fires: as dist__output. */
#pragma dtrace_nif otp_vm dist.c:dist_port_commandv not_fed no event for a write to a distribution port (only cumulative counters)
	probe dist__outputv(char *node, char *port, char *remote_node, int64_t bytes);

	/* Never fires: the system monitor reports only the busy side. */
#pragma dtrace_nif otp_vm dist.c:erts_dist_port_not_busy not_fed the system monitor reports busy_dist_port only, not its end
	probe dist__port_not_busy(char *node, char *port, char *remote_node);

	/* Never fires: the system monitor reports only the busy side. */
#pragma dtrace_nif otp_vm io.c:set_busy_port not_fed the system monitor reports busy_port only, not its end
	probe port__not_busy(char *port);

	/* Never fires: no event carries a driver's version or flags. */
#pragma dtrace_nif otp_vm io.c:init_driver not_fed no event when a driver is initialised (erl_ddll gives names only)
	probe driver__init(char *name, int64_t major, int64_t minor, int64_t flags);

	/* Never fires: the ports' open event names the port, not its driver. */
#pragma dtrace_nif otp_vm io.c:erts_open_driver not_fed the open event gives the port's name (the command of a spawn port), not the driver's
	probe driver__start(char *process, char *name, char *port);

	/* Never fires: as driver__start. */
#pragma dtrace_nif otp_vm io.c:terminate_port not_fed the closed event gives neither the driver's name nor the stop callback's time
	probe driver__stop(char *process, char *name, char *port);

	/* Never fires: unloading a driver has no event. */
#pragma dtrace_nif otp_vm erl_bif_ddll.c:do_unload_driver_entry not_fed no event when a driver is unloaded
	probe driver__finish(char *name);

	/* Never fires yet. */
#pragma dtrace_nif otp_vm io.c:flush_port not_fed not fed yet: running_ports' in/out flush events would feed it, with that flag's cost on every port task
	probe driver__flush(char *process, char *port, char *port_name);

	/* Never fires: OTP 27 never calls a driver's event callback. */
#pragma dtrace_nif otp_vm erl_driver.h:unused_event_callback not_fed OTP never fires it (the callback is unused)
	probe driver__event(char *node, char *port, char *port_name);

	/* Never fires: port tasks' events do not say which callback runs. */
#pragma dtrace_nif otp_vm erl_port_task.c:erts_port_task_execute not_fed running_ports' events give no operation for I/O tasks
	probe driver__ready_input(char *node, char *port, char *port_name);

	/* Never fires: as driver__ready_input. */
#pragma dtrace_nif otp_vm erl_port_task.c:erts_port_task_execute not_fed running_ports' events give no operation for I/O tasks
	probe driver__ready_output(char *node, char *port, char *port_name);

	/* Never fires: async jobs' completion has no event. */
#pragma dtrace_nif otp_vm io.c:async_ready not_fed no event when a driver's async job completes
	probe driver__ready_async(char *process, char *port, char *port_name);

	/* Never fires: a driver's process monitors have no event. */
#pragma dtrace_nif otp_vm io.c:erts_fire_port_monitor not_fed no event when a driver's monitor of a process fires
	probe driver__process_exit(char *node, char *port, char *port_name);

	/* Never fires: check I/O has no event. */
#pragma dtrace_nif otp_vm ../sys/common/erl_check_io.c:driver_select not_fed no event when check I/O stops a select
	probe driver__stop_select(char *name);

	/* Not OTP's. dtrace:p/N and pn/N, while it listens: fired right after the user probe (probe: its note name), in the same process, with the caller's Erlang stack (process_info(self(), current_stacktrace), innermost first, m:f/arity:line joined by " <- ", cut at 255 bytes); user_tag as the user probe's. */
	probe dtrace_user__stack(char *proc, char *user_tag, char *probe, char *stack);

	/* Not OTP's. send, while it listens (dtrace_vm then sets the send match spec [{'_', [], [{message, {process_dump}}]}]): sender sent a message of size words (message__send's size; -1 when not counted) holding binaries of binary_bytes bytes to receiver; code: the functions on the sender's stack, innermost first, joined by " <- " (up to 4; "<unknown>" when the dump has none). Costs a process dump per send while it listens. */
	probe dtrace_message__send_code(char *sender, char *receiver, int64_t size, int64_t binary_bytes, char *code);

	/* Not OTP's. send, for large messages only: sender sent a message of size words (message__send's size) holding binaries of binary_bytes bytes (shared by a local send, copied to another node) to receiver, and size is at least 1024 or binary_bytes at least 16384, or size is -1 (not counted: over 10,000 terms, or a fun). A smaller send fires nothing: it costs the trace event and the walk of its message, not the probe (priv/bpftrace/large-messages.bt). */
	probe dtrace_message__send_large(char *sender, char *receiver, int64_t size, int64_t binary_bytes);

	/* Not OTP's. procs: p and other were linked or unlinked; kind is link, unlink, getting_linked or getting_unlinked. */
	probe dtrace_process__link(char *p, char *other, char *kind);

	/* Not OTP's. procs: p and other were unlinked; kind is unlink (p unlinked other) or getting_unlinked. */
	probe dtrace_process__unlink(char *p, char *other, char *kind);

	/* Not OTP's. procs: p registered or unregistered name; kind is register or unregister. */
	probe dtrace_process__register(char *p, char *name, char *kind);

	/* Not OTP's. ports: port and other were linked or unlinked; kind as for dtrace_process__link. */
	probe dtrace_port__link(char *port, char *other, char *kind);

	/* Not OTP's. dtrace_vm's poll (every vm_probes_poll_ms, 100 by default) while a tracer listens: the VM probes' mode, "auto" or "manual" (in manual mode the VM probes fire only for processes traced with {tracer, dtrace_tracer, []}: a shipped script warns). */
	probe dtrace_vm__mode(char *mode);

	/* Not OTP's. dtrace_names, while it listens: p is named name, for each live process when a tracer starts listening (the semaphore rises) and for each new or renamed one after (dtrace_names says how often). name is the first of: its registered name, its proc_lib label (OTP 27), a process_name in its dictionary (RabbitMQ's), its $initial_call as m:f/arity, its initial call; cut at 255 bytes. */
	probe dtrace_process__name(char *p, char *name);
};

/*
 * OTP's own LTTng-UST events for the VM (runtime_tools' dyntrace.c in a
 * VM built --with-dynamic-trace=lttng; its user guide "LTTng and
 * Erlang/OTP"), with OTP's field names, types and order: the same
 * erl_tracer events feed them (the feed table below).
 */
provider org_erlang_dyntrace {
#pragma dtrace_nif lttng-only

	/* procs spawn: pid spawned by parent, starting in entry (m:f/arity). */
	probe process_spawn(char *pid, char *parent, char *entry);

	/* procs link, unlink, getting_linked, getting_unlinked: from and to, type link or unlink. */
	probe process_link(char *from, char *to, char *type);

	/* procs exit: pid exits with reason (~p text). */
	probe process_exit(char *pid, char *reason);

	/* procs register, unregister: pid and name; type register or unregister. */
	probe process_register(char *pid, char *name, char *type);

	/* running: pid scheduled in or out; entry m:f/arity; type in, out, in_exiting, out_exiting, out_exited. */
	probe process_scheduled(char *pid, char *entry, char *type);

	/* ports open: pid opened port with driver (the name it was opened with). */
	probe port_open(char *pid, char *driver, char *port);

	/* ports closed: port exits with reason. */
	probe port_exit(char *port, char *reason);

	/* ports link, unlink, getting_linked: from and to, type link or unlink. */
	probe port_link(char *from, char *to, char *type);

	/* running_ports: port (pid field) scheduled in or out for entry (the operation). */
	probe port_scheduled(char *pid, char *entry, char *type);

	/* call: pid calls entry; depth 0 (OTP's). */
	probe function_call(char *pid, char *entry, unsigned int depth);

	/* call: entry returns to pid; depth 0 (OTP's). */
	probe function_return(char *pid, char *entry, unsigned int depth);

	/* call with exception_trace: entry leaves pid with an exception of class. */
	probe function_exception(char *pid, char *entry, char *class);

	/* send: from sent message (~p text) to to. */
	probe message_send(char *from, char *to, char *message);

	/* 'receive': message (~p text) queued to to. */
	probe message_receive(char *to, char *message);

	/* garbage_collection: a minor collection of pid starts; need, heap and old_heap in words. */
	probe gc_minor_start(char *pid, unsigned long need, unsigned long heap, unsigned long old_heap);

	/* garbage_collection: a minor collection of pid ended; reclaimed, heap and old_heap in words. */
	probe gc_minor_end(char *pid, unsigned long reclaimed, unsigned long heap, unsigned long old_heap);

	/* garbage_collection: a major collection of pid starts; need, heap and old_heap in words. */
	probe gc_major_start(char *pid, unsigned long need, unsigned long heap, unsigned long old_heap);

	/* garbage_collection: a major collection of pid ended; reclaimed, heap and old_heap in words. */
	probe gc_major_end(char *pid, unsigned long reclaimed, unsigned long heap, unsigned long old_heap);
};

/*
 * The VM's feeds: which erl_tracer events feed which VM probes and events.
 * One row per feed; several rows may share a formatting function
 * (native/dtrace_nif/src/vm/), which is given the trace tag:
 *   on=      what the events are about: processes, ports, or spawn_meta
 *            (meta tracing of erlang:spawn/3, spawn_link/3, spawn_opt/4,
 *            which sets no trace flag on any process), node_monitor
 *            (net_kernel:monitor_nodes/2's messages), system_monitor
 *            (erlang:system_monitor/2's, taken only while nobody else
 *            holds it) or exit_meta (meta tracing of erlang:exit/2);
 *            the last four set no trace flag: src/vm/dtrace_vm.erl
 *            sets their patterns, subscription or monitor while one of
 *            their rows' probes listens;
 *   flags=   the trace flags automatic mode sets on every process or port
 *            while a tracer listens to one of the row's probes or events;
 *   tags=    erl_tracer's trace tags: enabled/3 answers `trace' for them
 *            while one of them listens, and trace/5 calls fmt=;
 *   sdt=     the SDT probes and lttng= the LTTng events the row fires;
 *   auto=no  automatic mode does not set the row's flags for it: the row
 *            fires where they are set anyway (by another row, or by a
 *            user's own {tracer, dtrace_tracer, []}, as OTP's LTTng build would).
 *            The spawn row is so: process__spawn alone is fed by the
 *            spawn_meta row, and from procs when automatic mode traces
 *            processes for another probe anyway (src/vm/dtrace_vm.erl).
 * A trace tag may be in several rows: each row's function runs.
 * The most frequent events first: the tags are looked up in this order.
 */
#pragma dtrace_nif feed on=processes flags=send tags=send,send_to_non_existing_process sdt=message__send,message__send__remote lttng=message_send fmt=send
#pragma dtrace_nif feed on=processes flags=send tags=send,send_to_non_existing_process sdt=dtrace_message__send_code fmt=send_code
#pragma dtrace_nif feed on=processes flags=send tags=send,send_to_non_existing_process sdt=dtrace_message__send_large fmt=send_large
#pragma dtrace_nif feed on=processes flags=receive tags=receive sdt=message__queued lttng=message_receive fmt=queued
#pragma dtrace_nif feed on=processes flags=running,exiting tags=in,in_exiting sdt=process__scheduled lttng=process_scheduled fmt=scheduled
#pragma dtrace_nif feed on=processes flags=running,exiting tags=out,out_exiting,out_exited sdt=process__unscheduled,process__hibernate lttng=process_scheduled fmt=unscheduled
#pragma dtrace_nif feed on=processes flags=call,arity tags=call sdt=global__function__entry,local__function__entry,bif__entry,nif__entry lttng=function_call fmt=call
#pragma dtrace_nif feed on=processes flags=call,arity tags=return_from,exception_from sdt=function__return,bif__return,nif__return lttng=function_return,function_exception fmt=call_return
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_minor_start sdt=gc_minor__start lttng=gc_minor_start fmt=gc
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_minor_end sdt=gc_minor__end lttng=gc_minor_end fmt=gc
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_major_start sdt=gc_major__start lttng=gc_major_start fmt=gc
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_major_end sdt=gc_major__end lttng=gc_major_end fmt=gc
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_minor_start,gc_minor_end,gc_major_start,gc_major_end sdt=process__heap_grow,process__heap_shrink fmt=heap_size
#pragma dtrace_nif feed on=processes flags=procs tags=spawn sdt=process__spawn lttng=process_spawn fmt=spawn auto=no
#pragma dtrace_nif feed on=processes flags=procs tags=exit sdt=process__exit lttng=process_exit fmt=exit
#pragma dtrace_nif feed on=processes flags=procs tags=link,unlink,getting_linked,getting_unlinked sdt=dtrace_process__link lttng=process_link fmt=link
#pragma dtrace_nif feed on=processes flags=procs tags=unlink,getting_unlinked sdt=dtrace_process__unlink fmt=unlink
#pragma dtrace_nif feed on=processes flags=procs tags=register,unregister sdt=dtrace_process__register lttng=process_register fmt=register
#pragma dtrace_nif feed on=spawn_meta tags=call,return_from sdt=process__spawn lttng=process_spawn fmt=spawn_meta
#pragma dtrace_nif feed on=exit_meta tags=call sdt=process__exit_signal fmt=exit_signal
#pragma dtrace_nif feed on=node_monitor tags=nodeup,nodedown sdt=dist__monitor fmt=dist_monitor
#pragma dtrace_nif feed on=system_monitor tags=busy_port sdt=port__busy fmt=busy_port
#pragma dtrace_nif feed on=system_monitor tags=busy_dist_port sdt=dist__port_busy fmt=busy_dist_port
#pragma dtrace_nif feed on=ports flags=ports tags=open sdt=port__open lttng=port_open fmt=port_open
#pragma dtrace_nif feed on=ports flags=ports tags=closed sdt=port__exit lttng=port_exit fmt=port_exit
#pragma dtrace_nif feed on=ports flags=ports tags=link,unlink,getting_linked,getting_unlinked sdt=dtrace_port__link lttng=port_link fmt=port_link
#pragma dtrace_nif feed on=ports flags=receive tags=receive sdt=port__command fmt=port_command
#pragma dtrace_nif feed on=ports flags=receive tags=receive sdt=port__control,port__connect,driver__output,driver__outputv,driver__control,driver__call,driver__timeout fmt=port_receive
#pragma dtrace_nif feed on=ports flags=running_ports tags=in,out lttng=port_scheduled fmt=port_scheduled
#pragma dtrace_nif feed on=ports flags=ports tags=register,unregister sdt=dtrace_process__register lttng=process_register fmt=register auto=no
#pragma dtrace_nif feed on=ports flags=send tags=send,send_to_non_existing_process sdt=message__send,message__send__remote lttng=message_send fmt=send auto=no
#pragma dtrace_nif feed on=ports flags=receive tags=receive lttng=message_receive fmt=queued auto=no
#pragma dtrace_nif feed on=spans flags=running tags=in,out sdt=span__vm_scheduled fmt=span_scheduled
#pragma dtrace_nif feed on=spans flags=garbage_collection tags=gc_minor_start,gc_minor_end,gc_major_start,gc_major_end sdt=span__vm_gc fmt=span_gc
#pragma dtrace_nif feed on=spans flags=send tags=send,send_to_non_existing_process sdt=span__vm_send fmt=span_send
#pragma dtrace_nif feed on=spans flags=receive tags=receive sdt=span__vm_receive fmt=span_receive
#pragma dtrace_nif feed on=processes flags=running tags=in,out sdt=span__vm_scheduled fmt=span_scheduled auto=no
#pragma dtrace_nif feed on=processes flags=garbage_collection tags=gc_minor_start,gc_minor_end,gc_major_start,gc_major_end sdt=span__vm_gc fmt=span_gc auto=no
#pragma dtrace_nif feed on=processes flags=send tags=send,send_to_non_existing_process sdt=span__vm_send fmt=span_send auto=no
#pragma dtrace_nif feed on=processes flags=receive tags=receive sdt=span__vm_receive fmt=span_receive auto=no

/*
 * OTP's efile command numbers (efile_drv.c, OTP 20): `command' of the
 * efile_drv__* probes. dtrace_file (src/api/dtrace_efile.hrl), priv/bpftrace/efile.bt,
 * priv/dtrace/efile_drv.d and docs/reference.md carry copies written from this
 * table (`make generated').
 */
#pragma dtrace_nif efile_command OPEN 1
#pragma dtrace_nif efile_command READ 2
#pragma dtrace_nif efile_command LSEEK 3
#pragma dtrace_nif efile_command WRITE 4
#pragma dtrace_nif efile_command FSTAT 5
#pragma dtrace_nif efile_command PWD 6
#pragma dtrace_nif efile_command READDIR 7
#pragma dtrace_nif efile_command CHDIR 8
#pragma dtrace_nif efile_command FSYNC 9
#pragma dtrace_nif efile_command MKDIR 10
#pragma dtrace_nif efile_command DELETE 11
#pragma dtrace_nif efile_command RENAME 12
#pragma dtrace_nif efile_command RMDIR 13
#pragma dtrace_nif efile_command TRUNCATE 14
#pragma dtrace_nif efile_command READ_FILE 15
#pragma dtrace_nif efile_command WRITE_INFO 16
#pragma dtrace_nif efile_command LSTAT 19
#pragma dtrace_nif efile_command READLINK 20
#pragma dtrace_nif efile_command LINK 21
#pragma dtrace_nif efile_command SYMLINK 22
#pragma dtrace_nif efile_command CLOSE 23
#pragma dtrace_nif efile_command PWRITEV 24
#pragma dtrace_nif efile_command PREADV 25
#pragma dtrace_nif efile_command READ_LINE 29
#pragma dtrace_nif efile_command FDATASYNC 30
#pragma dtrace_nif efile_command FADVISE 31
