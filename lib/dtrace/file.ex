defmodule DTrace.File do
  @moduledoc """
  File I/O that tracers can attribute to the work that caused it.

  The functions of Erlang's `:file` that hot paths use, with the same
  arguments and return values (`:file`'s, not Elixir's `File`'s: charlists
  or binaries for names, `{:ok, value}` / `{:error, posix}` results). While
  a tracer listens on an `efile_drv__*` probe, each call fires OTP's
  file-driver probes with the caller's user tag (own or spread), the
  command number, the paths and sizes, and success/errno; otherwise it
  costs one NIF call reading four semaphores, then calls `:file`.

      iex> DTrace.put_tag("req-42")
      :undefined
      iex> DTrace.File.read_file("/nonexistent/file")
      {:error, :enoent}

  A thin layer over the Erlang module `:dtrace_file`, whose documentation
  lists the probe arguments of every function; `priv/efile.bt` prints the
  operations with their tags and a latency histogram per tag.
  """

  @doc "As `:file.open/2`; fires OPEN (1) with the path and open flags."
  defdelegate open(file, modes), to: :dtrace_file
  @doc "As `:file.close/1`; fires CLOSE (23)."
  defdelegate close(io_device), to: :dtrace_file
  @doc "As `:file.read/2`; fires READ (2) with the size asked for."
  defdelegate read(io_device, number), to: :dtrace_file
  @doc "As `:file.read_line/1`; fires READ_LINE (29)."
  defdelegate read_line(io_device), to: :dtrace_file
  @doc "As `:file.write/2`; fires WRITE (4) with the size in bytes."
  defdelegate write(io_device, bytes), to: :dtrace_file
  @doc "As `:file.pread/2`; fires PREADV (25) with the total size."
  defdelegate pread(io_device, loc_nums), to: :dtrace_file
  @doc "As `:file.pread/3`; fires PREADV (25) with the size."
  defdelegate pread(io_device, location, number), to: :dtrace_file
  @doc "As `:file.pwrite/2`; fires PWRITEV (24) with the total size."
  defdelegate pwrite(io_device, loc_bytes), to: :dtrace_file
  @doc "As `:file.pwrite/3`; fires PWRITEV (24) with the size."
  defdelegate pwrite(io_device, location, bytes), to: :dtrace_file
  @doc "As `:file.position/2`; fires LSEEK (3) with offset and origin."
  defdelegate position(io_device, location), to: :dtrace_file
  @doc "As `:file.sync/1`; fires FSYNC (9)."
  defdelegate sync(io_device), to: :dtrace_file
  @doc "As `:file.datasync/1`; fires FDATASYNC (30)."
  defdelegate datasync(io_device), to: :dtrace_file
  @doc "As `:file.truncate/1`; fires TRUNCATE (14)."
  defdelegate truncate(io_device), to: :dtrace_file
  @doc "As `:file.advise/4`; fires FADVISE (31) with offset, length and advice."
  defdelegate advise(io_device, offset, length, advise), to: :dtrace_file
  @doc "As `:file.read_file/1`; fires READ_FILE (15) with the path."
  defdelegate read_file(filename), to: :dtrace_file
  @doc "As `:file.write_file/2`; fires OPEN, WRITE and CLOSE, as OTP's driver did."
  defdelegate write_file(filename, bytes), to: :dtrace_file
  @doc "As `:file.write_file/3`; fires OPEN, WRITE and CLOSE."
  defdelegate write_file(filename, bytes, modes), to: :dtrace_file
  @doc "As `:file.read_file_info/1`; fires FSTAT (5) with the path or descriptor."
  defdelegate read_file_info(file), to: :dtrace_file
  @doc "As `:file.read_file_info/2`; fires FSTAT (5)."
  defdelegate read_file_info(file, opts), to: :dtrace_file
  @doc "As `:file.read_link_info/1`; fires LSTAT (19) with the path."
  defdelegate read_link_info(name), to: :dtrace_file
  @doc "As `:file.read_link_info/2`; fires LSTAT (19)."
  defdelegate read_link_info(name, opts), to: :dtrace_file
  @doc "As `:file.write_file_info/2`; fires WRITE_INFO (16) with mode, uid and gid."
  defdelegate write_file_info(filename, info), to: :dtrace_file
  @doc "As `:file.write_file_info/3`; fires WRITE_INFO (16)."
  defdelegate write_file_info(filename, info, opts), to: :dtrace_file
  @doc "As `:file.rename/2`; fires RENAME (12) with both paths."
  defdelegate rename(source, destination), to: :dtrace_file
  @doc "As `:file.delete/1`; fires DELETE (11) with the path."
  defdelegate delete(filename), to: :dtrace_file
  @doc "As `:file.delete/2`; fires DELETE (11)."
  defdelegate delete(filename, opts), to: :dtrace_file
  @doc "As `:file.make_dir/1`; fires MKDIR (10) with the path."
  defdelegate make_dir(dir), to: :dtrace_file
  @doc "As `:file.del_dir/1`; fires RMDIR (13) with the path."
  defdelegate del_dir(dir), to: :dtrace_file
  @doc "As `:file.list_dir/1`; fires READDIR (7) with the path."
  defdelegate list_dir(dir), to: :dtrace_file
  @doc "As `:file.list_dir_all/1`; fires READDIR (7)."
  defdelegate list_dir_all(dir), to: :dtrace_file
  @doc "As `:file.read_link/1`; fires READLINK (20) with the path."
  defdelegate read_link(name), to: :dtrace_file
  @doc "As `:file.read_link_all/1`; fires READLINK (20)."
  defdelegate read_link_all(name), to: :dtrace_file
  @doc "As `:file.make_link/2`; fires LINK (21) with both paths."
  defdelegate make_link(existing, new), to: :dtrace_file
  @doc "As `:file.make_symlink/2`; fires SYMLINK (22) with both paths."
  defdelegate make_symlink(existing, new), to: :dtrace_file
  @doc "As `:file.get_cwd/0`; fires PWD (6)."
  defdelegate get_cwd(), to: :dtrace_file
  @doc "As `:file.set_cwd/1`; fires CHDIR (8) with the path."
  defdelegate set_cwd(dir), to: :dtrace_file
end
