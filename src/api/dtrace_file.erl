%%% @doc File I/O that tracers can attribute: the `file' functions used on
%%% hot paths, with the probes of OTP's old file driver.
%%%
%%% Each function takes the same arguments and returns the same values as
%%% the `file' function of the same name, and calls it. While a tracer
%%% listens on an `efile_drv__*' probe, the call is bracketed by OTP's four
%%% file-driver probes (provider `erlang'), carrying the caller's user tag:
%%% ```
%%% efile_drv__entry(int thread_id, int tag, char *user_tag, int command,
%%%                  char *s1, char *s2, int64 i1, int64 i2, int64 i3,
%%%                  int64 i4, char *port)
%%% efile_drv__int_entry(int thread_id, int tag, int command)
%%% efile_drv__int_return(int thread_id, int tag, int command)
%%% efile_drv__return(int thread_id, int tag, char *user_tag, int command,
%%%                   int success, int errno)
%%% '''
%%% These are the layouts and command numbers of OTP 20's `efile_drv'
%%% (`erlang_dtrace.d', `efile_drv.c'), whose probes OTP 21 removed along
%%% with the driver. Scripts written for them (OTP's `efile_drv.d', and
%%% `priv/dtrace/efile_drv.d', `priv/bpftrace/efile.bt' here) work unchanged.
%%%
%%% == Safe in production ==
%%% With no tracer listening, a call costs one NIF call that reads four
%%% semaphores, then the `file' call itself; no argument is looked at.
%%% ```
%%% 1> dtrace:put_tag(<<"req-42">>).
%%% undefined
%%% 2> dtrace_file:rename("old-name", "new-name").
%%% {error,enoent}
%%% '''
%%% and, as root, with `bpftrace -p <os pid> priv/bpftrace/efile.bt' attached (a
%%% real session; the latency includes the tracer's own work):
%%% ```
%%% Attaching 4 probes...
%%% Tracing dtrace_file I/O (efile_drv__entry/return)... Ctrl-C to end.
%%% efile RENAME(12) {2,1} tag=req-42 s1=old-name s2=new-name
%%% efile RENAME(12) {2,1} tag=req-42 error errno=2 in 190 us
%%% '''
%%% `{2,1}' is the operation: scheduler 2, its first file operation.
%%%
%%% == What the probes carry ==
%%% <ul>
%%% <li>`{thread_id, tag}' names one operation, in all four probes: the
%%%   scheduler the call started on and that scheduler's operation counter
%%%   (1, 2, ...; wraps at 2^31).</li>
%%% <li>`user_tag': the caller's own tag, else the tag it adopted through
%%%   spreading ({@link dtrace:get_tag_data/0}), else NULL.</li>
%%% <li>`command' and what it fills, as in OTP (unused arguments are NULL or
%%%   0): `open' OPEN (1): s1 path, i1 open flags (read 1, write 2, append
%%%   4, compressed 8, exclusive 16, sync 64; read when none of the first
%%%   three); `read' READ (2): i1 fd, i3 size; `position' LSEEK (3): i1 fd,
%%%   i2 offset, i3 origin (bof 0, cur 1, eof 2); `write' WRITE (4): i1 fd,
%%%   i3 size in bytes; `read_file_info' FSTAT (5): s1 path (i1 then -1: no
%%%   descriptor), or i1 fd for an open file; `get_cwd' PWD (6); `list_dir', `list_dir_all' READDIR (7):
%%%   s1; `set_cwd' CHDIR (8): s1; `sync' FSYNC (9): i1 fd; `make_dir'
%%%   MKDIR (10): s1; `delete' DELETE (11): s1; `rename' RENAME (12): s1
%%%   old, s2 new; `del_dir' RMDIR (13): s1; `truncate' TRUNCATE (14): i1
%%%   fd; `read_file' READ_FILE (15): s1; `write_file_info' WRITE_INFO
%%%   (16): i1 mode, i2 uid, i3 gid; `read_link_info' LSTAT (19): s1;
%%%   `read_link', `read_link_all' READLINK (20): s1; `make_link' LINK
%%%   (21): s1 existing, s2 new; `make_symlink' SYMLINK (22): s1, s2;
%%%   `close' CLOSE (23): i1 fd; `pwrite' PWRITEV (24): i1 fd, i3 total
%%%   size; `pread' PREADV (25): i1 fd, i3 total size; `read_line'
%%%   READ_LINE (29): i1 fd; `datasync' FDATASYNC (30): i1 fd; `advise'
%%%   FADVISE (31): i1 fd, i2 offset, i3 length, i4 advice (normal 0,
%%%   random 1, sequential 2, will_need 3, dont_need 4, no_reuse 5).
%%%   `write_file' is three operations, OPEN, WRITE and CLOSE, as in
%%%   OTP.</li>
%%% <li>`fd' (i1) is the OS file descriptor of a file opened with `raw'. A
%%%   file opened without `raw' is an I/O server process that holds the
%%%   descriptor: `fd' is -1 and `port' is the server's pid. `fd' is also
%%%   -1 where the descriptor is out of reach (`raw' files opened with
%%%   `compressed' or `delayed_write', `ram' files) and on a closed file.</li>
%%% <li>`port': OTP passed the driver port doing the I/O; here it is the
%%%   process doing it, formatted like `pid_to_list/1': the file's I/O
%%%   server, else the caller.</li>
%%% <li>`success' is 0 when the call returned `{error, Reason}' (or
%%%   `{error, {N, Reason}}' from `pwrite/2') or raised, else 1 (`eof'
%%%   included); `errno' is the POSIX number of `Reason' (`enoent' is 2 on
%%%   Linux), 0 for a reason that is not a POSIX error (`badarg',
%%%   `terminated', an exception).</li>
%%% <li>`efile_drv__entry' and `__int_entry' fire one after the other just
%%%   before the `file' call, `__int_return' and `__return' just after it,
%%%   all in the calling process. (OTP's driver fired the `int_' pair on
%%%   its async I/O thread; here the I/O runs on the VM's dirty I/O
%%%   schedulers or in the I/O server, where no probe can follow it.)</li>
%%% </ul>
%%% @end
-module(dtrace_file).

-include_lib("kernel/include/file.hrl").

-export([open/2, close/1, read/2, read_line/1, write/2, pread/2, pread/3,
         pwrite/2, pwrite/3, position/2, sync/1, datasync/1, truncate/1, advise/4,
         read_file/1, write_file/2, write_file/3,
         read_file_info/1, read_file_info/2, read_link_info/1, read_link_info/2,
         write_file_info/2, write_file_info/3,
         rename/2, delete/1, delete/2, make_dir/1, del_dir/1,
         list_dir/1, list_dir_all/1, read_link/1, read_link_all/1,
         make_link/2, make_symlink/2, get_cwd/0, set_cwd/1]).

%% OTP's efile command numbers (-define(OPEN, 1) ...), generated from the
%% catalogue (native/dtrace_nif/probes.d) by `make generated'.
-include("dtrace_efile.hrl").

%% Calls `Call' directly unless a tracer listens on an efile_drv probe.
%% The probe arguments are expressions evaluated only when one does. A
%% macro, so that the disabled path is the NIF call and `Call', nothing
%% more (no closure is made).
-define(TRACED(Command, S1, S2, I1, I2, I3, I4, Device, Call),
        case dtrace_nif:efile_enabled() of
            false -> Call;
            true -> traced(Command, S1, S2, I1, I2, I3, I4, Device, fun() -> Call end)
        end).
-define(PATH(Command, Name, Call),
        ?TRACED(Command, name(Name), undef, undef, undef, undef, undef, undefined, Call)).
-define(PATHS(Command, Name1, Name2, Call),
        ?TRACED(Command, name(Name1), name(Name2), undef, undef, undef, undef, undefined, Call)).
-define(DEVICE(Command, Dev, I2, I3, I4, Call),
        ?TRACED(Command, undef, undef, fd(Dev), I2, I3, I4, Dev, Call)).
%% FSTAT takes a name or an open file.
-define(FSTAT_OF(File, Call),
        ?TRACED(?FSTAT, name_or_undef(File), undef, fd(File), undef, undef, undef, device(File),
                Call)).
-define(WRITE_INFO_OF(Info, Call),
        ?TRACED(?WRITE_INFO, undef, undef, info(#file_info.mode, Info), info(#file_info.uid, Info),
                info(#file_info.gid, Info), undef, undefined, Call)).

-type location() :: integer() | {bof | cur | eof, integer()} | bof | cur | eof.
%% A position, as `file:position/2' takes it.
-export_type([location/0]).

%%%===================================================================
%%% Open files
%%%===================================================================

%% @doc As `file:open/2'. OPEN (1): s1 `File', i1 the open flags.
-spec open(file:name_all() | iodata(), [file:mode() | ram | directory]) ->
          {ok, file:io_device()} | {error, file:posix() | badarg | system_limit}.
open(File, Modes) ->
    ?TRACED(?OPEN, name(File), undef, open_flags(Modes), undef, undef, undef, undefined,
            file:open(File, Modes)).

%% @doc As `file:close/1'. CLOSE (23): i1 fd.
-spec close(file:io_device()) -> ok | {error, file:posix() | badarg | terminated}.
close(IoDevice) ->
    ?DEVICE(?CLOSE, IoDevice, undef, undef, undef, file:close(IoDevice)).

%% @doc As `file:read/2'. READ (2): i1 fd, i3 `Number'.
-spec read(file:io_device() | atom(), non_neg_integer()) ->
          {ok, string() | binary()} | eof | {error, term()}.
read(IoDevice, Number) ->
    ?DEVICE(?READ, IoDevice, undef, Number, undef, file:read(IoDevice, Number)).

%% @doc As `file:read_line/1'. READ_LINE (29): i1 fd.
-spec read_line(file:io_device() | atom()) ->
          {ok, string() | binary()} | eof | {error, term()}.
read_line(IoDevice) ->
    ?DEVICE(?READ_LINE, IoDevice, undef, undef, undef, file:read_line(IoDevice)).

%% @doc As `file:write/2'. WRITE (4): i1 fd, i3 the size of `Bytes' in
%% bytes (0 if it is not iodata).
-spec write(file:io_device() | atom(), iodata() | unicode:chardata()) ->
          ok | {error, term()}.
write(IoDevice, Bytes) ->
    ?DEVICE(?WRITE, IoDevice, undef, size_of(Bytes), undef, file:write(IoDevice, Bytes)).

%% @doc As `file:pread/2'. PREADV (25): i1 fd, i3 the total of the
%% numbers of bytes asked for.
-spec pread(file:io_device(), [{location(), non_neg_integer()}]) ->
          {ok, [string() | binary() | eof]} | eof | {error, term()}.
pread(IoDevice, LocNums) ->
    ?DEVICE(?PREADV, IoDevice, undef, total(LocNums), undef, file:pread(IoDevice, LocNums)).

%% @doc As `file:pread/3'. PREADV (25): i1 fd, i3 `Number'.
-spec pread(file:io_device(), location(), non_neg_integer()) ->
          {ok, string() | binary()} | eof | {error, term()}.
pread(IoDevice, Location, Number) ->
    ?DEVICE(?PREADV, IoDevice, undef, Number, undef, file:pread(IoDevice, Location, Number)).

%% @doc As `file:pwrite/2'. PWRITEV (24): i1 fd, i3 the total size in
%% bytes. errno comes from `Reason' in `{error, {N, Reason}}'.
-spec pwrite(file:io_device(), [{location(), iodata()}]) ->
          ok | {error, {non_neg_integer(), term()}}.
pwrite(IoDevice, LocBytes) ->
    ?DEVICE(?PWRITEV, IoDevice, undef, total(LocBytes), undef, file:pwrite(IoDevice, LocBytes)).

%% @doc As `file:pwrite/3'. PWRITEV (24): i1 fd, i3 the size of `Bytes'.
-spec pwrite(file:io_device(), location(), iodata()) -> ok | {error, term()}.
pwrite(IoDevice, Location, Bytes) ->
    ?DEVICE(?PWRITEV, IoDevice, undef, size_of(Bytes), undef,
            file:pwrite(IoDevice, Location, Bytes)).

%% @doc As `file:position/2'. LSEEK (3): i1 fd, i2 offset, i3 origin (bof
%% 0, cur 1, eof 2).
-spec position(file:io_device(), location()) ->
          {ok, non_neg_integer()} | {error, term()}.
position(IoDevice, Location) ->
    case dtrace_nif:efile_enabled() of
        false ->
            file:position(IoDevice, Location);
        true ->
            {Offset, Origin} = seek(Location),
            traced(?LSEEK, undef, undef, fd(IoDevice), Offset, Origin, undef, device(IoDevice),
                   fun() -> file:position(IoDevice, Location) end)
    end.

%% @doc As `file:sync/1'. FSYNC (9): i1 fd.
-spec sync(file:io_device()) -> ok | {error, file:posix() | badarg | terminated}.
sync(IoDevice) ->
    ?DEVICE(?FSYNC, IoDevice, undef, undef, undef, file:sync(IoDevice)).

%% @doc As `file:datasync/1'. FDATASYNC (30): i1 fd.
-spec datasync(file:io_device()) -> ok | {error, file:posix() | badarg | terminated}.
datasync(IoDevice) ->
    ?DEVICE(?FDATASYNC, IoDevice, undef, undef, undef, file:datasync(IoDevice)).

%% @doc As `file:truncate/1'. TRUNCATE (14): i1 fd.
-spec truncate(file:io_device()) -> ok | {error, file:posix() | badarg | terminated}.
truncate(IoDevice) ->
    ?DEVICE(?TRUNCATE, IoDevice, undef, undef, undef, file:truncate(IoDevice)).

%% @doc As `file:advise/4'. FADVISE (31): i1 fd, i2 `Offset', i3
%% `Length', i4 `Advise' (normal 0, random 1, sequential 2, will_need 3,
%% dont_need 4, no_reuse 5).
-spec advise(file:io_device(), integer(), integer(),
             normal | sequential | random | no_reuse | will_need | dont_need) ->
          ok | {error, file:posix() | badarg}.
advise(IoDevice, Offset, Length, Advise) ->
    ?DEVICE(?FADVISE, IoDevice, Offset, Length, advice(Advise),
            file:advise(IoDevice, Offset, Length, Advise)).

%%%===================================================================
%%% Whole files
%%%===================================================================

%% @doc As `file:read_file/1'. READ_FILE (15): s1 `Filename'.
-spec read_file(file:name_all()) -> {ok, binary()} | {error, term()}.
read_file(Filename) ->
    ?PATH(?READ_FILE, Filename, file:read_file(Filename)).

%% @doc As `file:write_file/2'. While traced, three operations as in
%% OTP: OPEN, WRITE and CLOSE, run in the calling process (`file' runs
%% them in its file server) with the same results.
-spec write_file(file:name_all(), iodata()) ->
          ok | {error, file:posix() | badarg | terminated | system_limit}.
write_file(Filename, Bytes) ->
    case dtrace_nif:efile_enabled() of
        false ->
            file:write_file(Filename, Bytes);
        true ->
            %% file:write_file/2's checks, then the file server's work.
            case make_binary(Bytes) of
                Bin when is_binary(Bin) -> do_write_file(Filename, Bin, [raw]);
                {error, _} -> {error, badarg}
            end
    end.

%% @doc As `file:write_file/3'. While traced, three operations as in OTP:
%% OPEN, WRITE and CLOSE.
-spec write_file(file:name_all(), iodata(), [file:mode()]) ->
          ok | {error, file:posix() | badarg | terminated | system_limit}.
write_file(Filename, Bytes, Modes) ->
    case dtrace_nif:efile_enabled() of
        false ->
            file:write_file(Filename, Bytes, Modes);
        true when is_list(Modes) ->
            %% file:write_file/3's own steps, with the traced functions.
            case lists:member(raw, Modes) of
                true ->
                    try iolist_size(Bytes) of
                        _ -> do_write_file(Filename, Bytes, Modes)
                    catch
                        error:Error -> {error, Error}
                    end;
                false ->
                    case make_binary(Bytes) of
                        Bin when is_binary(Bin) -> do_write_file(Filename, Bin, Modes);
                        Error -> Error
                    end
            end;
        true ->
            file:write_file(Filename, Bytes, Modes)
    end.

do_write_file(Filename, Bytes, Modes) ->
    case open(Filename, [binary, write | Modes]) of
        {ok, IoDevice} ->
            case write(IoDevice, Bytes) of
                ok ->
                    close(IoDevice);
                Error ->
                    _ = close(IoDevice),
                    Error
            end;
        Error ->
            Error
    end.

make_binary(Bin) when is_binary(Bin) ->
    Bin;
make_binary(List) ->
    try
        iolist_to_binary(List)
    catch
        error:Reason -> {error, Reason}
    end.

%%%===================================================================
%%% File information
%%%===================================================================

%% @doc As `file:read_file_info/1'. FSTAT (5): s1 the name (i1 -1), or
%% i1 fd for an open file.
-spec read_file_info(file:name_all() | file:io_device()) ->
          {ok, file:file_info()} | {error, file:posix() | badarg}.
read_file_info(File) ->
    ?FSTAT_OF(File, file:read_file_info(File)).

%% @doc As `file:read_file_info/2'. FSTAT (5): as {@link read_file_info/1}.
-spec read_file_info(file:name_all() | file:io_device(), list()) ->
          {ok, file:file_info()} | {error, file:posix() | badarg}.
read_file_info(File, Opts) ->
    ?FSTAT_OF(File, file:read_file_info(File, Opts)).

%% @doc As `file:read_link_info/1'. LSTAT (19): s1 `Name'.
-spec read_link_info(file:name_all()) ->
          {ok, file:file_info()} | {error, file:posix() | badarg}.
read_link_info(Name) ->
    ?PATH(?LSTAT, Name, file:read_link_info(Name)).

%% @doc As `file:read_link_info/2'. LSTAT (19): s1 `Name'.
-spec read_link_info(file:name_all(), list()) ->
          {ok, file:file_info()} | {error, file:posix() | badarg}.
read_link_info(Name, Opts) ->
    ?PATH(?LSTAT, Name, file:read_link_info(Name, Opts)).

%% @doc As `file:write_file_info/2'. WRITE_INFO (16): i1 mode, i2 uid, i3
%% gid (0 where the record leaves them `undefined').
-spec write_file_info(file:name_all(), file:file_info()) -> ok | {error, file:posix() | badarg}.
write_file_info(Filename, Info) ->
    ?WRITE_INFO_OF(Info, file:write_file_info(Filename, Info)).

%% @doc As `file:write_file_info/3'. WRITE_INFO (16): as
%% {@link write_file_info/2}.
-spec write_file_info(file:name_all(), file:file_info(), list()) ->
          ok | {error, file:posix() | badarg}.
write_file_info(Filename, Info, Opts) ->
    ?WRITE_INFO_OF(Info, file:write_file_info(Filename, Info, Opts)).

%%%===================================================================
%%% Names and directories
%%%===================================================================

%% @doc As `file:rename/2'. RENAME (12): s1 `Source', s2 `Destination'.
-spec rename(file:name_all(), file:name_all()) -> ok | {error, file:posix() | badarg}.
rename(Source, Destination) ->
    ?PATHS(?RENAME, Source, Destination, file:rename(Source, Destination)).

%% @doc As `file:delete/1'. DELETE (11): s1 `Filename'.
-spec delete(file:name_all()) -> ok | {error, file:posix() | badarg}.
delete(Filename) ->
    ?PATH(?DELETE, Filename, file:delete(Filename)).

%% @doc As `file:delete/2'. DELETE (11): s1 `Filename'.
-spec delete(file:name_all(), list()) -> ok | {error, file:posix() | badarg}.
delete(Filename, Opts) ->
    ?PATH(?DELETE, Filename, file:delete(Filename, Opts)).

%% @doc As `file:make_dir/1'. MKDIR (10): s1 `Dir'.
-spec make_dir(file:name_all()) -> ok | {error, file:posix() | badarg}.
make_dir(Dir) ->
    ?PATH(?MKDIR, Dir, file:make_dir(Dir)).

%% @doc As `file:del_dir/1'. RMDIR (13): s1 `Dir'.
-spec del_dir(file:name_all()) -> ok | {error, file:posix() | badarg}.
del_dir(Dir) ->
    ?PATH(?RMDIR, Dir, file:del_dir(Dir)).

%% @doc As `file:list_dir/1'. READDIR (7): s1 `Dir'.
-spec list_dir(file:name_all()) -> {ok, [file:filename()]} | {error, term()}.
list_dir(Dir) ->
    ?PATH(?READDIR, Dir, file:list_dir(Dir)).

%% @doc As `file:list_dir_all/1'. READDIR (7): s1 `Dir'.
-spec list_dir_all(file:name_all()) -> {ok, [file:filename_all()]} | {error, term()}.
list_dir_all(Dir) ->
    ?PATH(?READDIR, Dir, file:list_dir_all(Dir)).

%% @doc As `file:read_link/1'. READLINK (20): s1 `Name'.
-spec read_link(file:name_all()) -> {ok, file:filename()} | {error, term()}.
read_link(Name) ->
    ?PATH(?READLINK, Name, file:read_link(Name)).

%% @doc As `file:read_link_all/1'. READLINK (20): s1 `Name'.
-spec read_link_all(file:name_all()) -> {ok, file:filename_all()} | {error, term()}.
read_link_all(Name) ->
    ?PATH(?READLINK, Name, file:read_link_all(Name)).

%% @doc As `file:make_link/2'. LINK (21): s1 `Existing', s2 `New'.
-spec make_link(file:name_all(), file:name_all()) -> ok | {error, file:posix() | badarg}.
make_link(Existing, New) ->
    ?PATHS(?LINK, Existing, New, file:make_link(Existing, New)).

%% @doc As `file:make_symlink/2'. SYMLINK (22): s1 `Existing', s2 `New'.
-spec make_symlink(file:name_all(), file:name_all()) -> ok | {error, file:posix() | badarg}.
make_symlink(Existing, New) ->
    ?PATHS(?SYMLINK, Existing, New, file:make_symlink(Existing, New)).

%% @doc As `file:get_cwd/0'. PWD (6): no arguments.
-spec get_cwd() -> {ok, file:filename()} | {error, file:posix()}.
get_cwd() ->
    ?TRACED(?PWD, undef, undef, undef, undef, undef, undef, undefined, file:get_cwd()).

%% @doc As `file:set_cwd/1'. CHDIR (8): s1 `Dir'.
-spec set_cwd(file:name() | binary()) -> ok | {error, term()}.
set_cwd(Dir) ->
    ?PATH(?CHDIR, Dir, file:set_cwd(Dir)).

%%%===================================================================
%%% Traced calls (only while a tracer listens)
%%%===================================================================

traced(Command, S1, S2, I1, I2, I3, I4, Device, Call) ->
    Tag = dtrace_tag:get_tag_data(),
    ThreadId = erlang:system_info(scheduler_id),
    Op = dtrace_nif:efile_entry(ThreadId, Command, S1, S2, I1, I2, I3, I4, Tag, Device),
    try Call() of
        Result ->
            {Success, Reason} = outcome(Result),
            dtrace_nif:efile_return(ThreadId, Op, Command, Tag, Success, Reason),
            Result
    catch
        Class:Exception:Stack ->
            dtrace_nif:efile_return(ThreadId, Op, Command, Tag, false, exception),
            erlang:raise(Class, Exception, Stack)
    end.

outcome({error, {N, Reason}}) when is_integer(N) -> {false, Reason};
outcome({error, Reason}) -> {false, Reason};
outcome(_) -> {true, ok}.

%% A file name as the probe's string: a binary (raw filenames as they
%% are), else the characters flattened and UTF-8 encoded; `undef' (NULL)
%% if it is not a name.
name(Name) when is_binary(Name) ->
    Name;
name(Name) ->
    try unicode:characters_to_binary(filename:flatten(Name)) of
        Bin when is_binary(Bin) -> Bin;
        _ -> undef
    catch
        _:_ -> undef
    end.

name_or_undef(File) when is_pid(File); is_record(File, file_descriptor) -> undef;
name_or_undef(Name) -> name(Name).

%% The OS file descriptor of a raw file; -1 for anything else (a file's
%% I/O server holds its descriptor). prim_file:get_handle/1 is what
%% file:sendfile uses to reach it; it is only called while traced.
fd(#file_descriptor{module = prim_file} = Fd) ->
    try prim_file:get_handle(Fd) of
        <<N:32/native-signed>> -> N;
        _ -> -1
    catch
        _:_ -> -1
    end;
fd(#file_descriptor{data = #file_descriptor{} = Inner}) ->
    %% raw_file_io_list (raw without binary) wraps a prim_file one.
    fd(Inner);
fd(_) ->
    -1.

device(IoDevice) when is_pid(IoDevice) -> IoDevice;
device(_) -> undefined.

open_flags(Modes) when is_list(Modes) ->
    Flags = lists:foldl(fun open_flag/2, 0, Modes),
    case Flags band 7 of
        0 -> Flags bor 1;
        _ -> Flags
    end;
open_flags(Mode) when is_atom(Mode) ->
    open_flags([Mode]);
open_flags(_) ->
    undef.

open_flag(read, F) -> F bor 1;
open_flag(write, F) -> F bor 2;
open_flag(read_write, F) -> F bor 3;
open_flag(append, F) -> F bor 4;
open_flag(compressed, F) -> F bor 8;
open_flag(exclusive, F) -> F bor 16;
open_flag(sync, F) -> F bor 64;
open_flag(_, F) -> F.

seek(Offset) when is_integer(Offset) -> {Offset, 0};
seek({bof, Offset}) -> {Offset, 0};
seek({cur, Offset}) -> {Offset, 1};
seek({eof, Offset}) -> {Offset, 2};
seek(bof) -> {0, 0};
seek(cur) -> {0, 1};
seek(eof) -> {0, 2};
seek(_) -> {undef, undef}.

advice(normal) -> 0;
advice(random) -> 1;
advice(sequential) -> 2;
advice(will_need) -> 3;
advice(dont_need) -> 4;
advice(no_reuse) -> 5;
advice(_) -> undef.

size_of(Bytes) ->
    try
        iolist_size(Bytes)
    catch
        error:_ -> undef
    end.

%% The total of the sizes in a pread/pwrite list.
total(List) when is_list(List) ->
    try
        lists:foldl(fun({_, N}, Acc) when is_integer(N) -> Acc + N;
                       ({_, Bytes}, Acc) -> Acc + iolist_size(Bytes)
                    end, 0, List)
    catch
        error:_ -> undef
    end;
total(_) ->
    undef.

info(Field, Info) when is_record(Info, file_info) -> element(Field, Info);
info(_, _) -> undef.
