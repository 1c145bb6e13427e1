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
  lists the probe arguments of every function; `priv/bpftrace/efile.bt` prints the
  operations with their tags and a latency histogram per tag.
  """

  @doc "As `:file.open/2`; fires OPEN (1) with the path and open flags."
  @spec open(:file.name_all() | iodata(), [:file.mode() | :ram | :directory]) :: {:ok, :file.io_device()} | {:error, :file.posix() | :badarg | :system_limit}
  defdelegate open(file, modes), to: :dtrace_file
  @doc "As `:file.close/1`; fires CLOSE (23)."
  @spec close(:file.io_device()) :: :ok | {:error, :file.posix() | :badarg | :terminated}
  defdelegate close(io_device), to: :dtrace_file
  @doc "As `:file.read/2`; fires READ (2) with the size asked for."
  @spec read(:file.io_device() | atom(), non_neg_integer()) :: {:ok, charlist() | binary()} | :eof | {:error, term()}
  defdelegate read(io_device, number), to: :dtrace_file
  @doc "As `:file.read_line/1`; fires READ_LINE (29)."
  @spec read_line(:file.io_device() | atom()) :: {:ok, charlist() | binary()} | :eof | {:error, term()}
  defdelegate read_line(io_device), to: :dtrace_file
  @doc "As `:file.write/2`; fires WRITE (4) with the size in bytes."
  @spec write(:file.io_device() | atom(), iodata() | :unicode.chardata()) :: :ok | {:error, term()}
  defdelegate write(io_device, bytes), to: :dtrace_file
  @doc "As `:file.pread/2`; fires PREADV (25) with the total size."
  @spec pread(:file.io_device(), [{:dtrace_file.location(), non_neg_integer()}]) :: {:ok, [charlist() | binary() | :eof]} | :eof | {:error, term()}
  defdelegate pread(io_device, loc_nums), to: :dtrace_file
  @doc "As `:file.pread/3`; fires PREADV (25) with the size."
  @spec pread(:file.io_device(), :dtrace_file.location(), non_neg_integer()) :: {:ok, charlist() | binary()} | :eof | {:error, term()}
  defdelegate pread(io_device, location, number), to: :dtrace_file
  @doc "As `:file.pwrite/2`; fires PWRITEV (24) with the total size."
  @spec pwrite(:file.io_device(), [{:dtrace_file.location(), iodata()}]) :: :ok | {:error, {non_neg_integer(), term()}}
  defdelegate pwrite(io_device, loc_bytes), to: :dtrace_file
  @doc "As `:file.pwrite/3`; fires PWRITEV (24) with the size."
  @spec pwrite(:file.io_device(), :dtrace_file.location(), iodata()) :: :ok | {:error, term()}
  defdelegate pwrite(io_device, location, bytes), to: :dtrace_file
  @doc "As `:file.position/2`; fires LSEEK (3) with offset and origin."
  @spec position(:file.io_device(), :dtrace_file.location()) :: {:ok, non_neg_integer()} | {:error, term()}
  defdelegate position(io_device, location), to: :dtrace_file
  @doc "As `:file.sync/1`; fires FSYNC (9)."
  @spec sync(:file.io_device()) :: :ok | {:error, :file.posix() | :badarg | :terminated}
  defdelegate sync(io_device), to: :dtrace_file
  @doc "As `:file.datasync/1`; fires FDATASYNC (30)."
  @spec datasync(:file.io_device()) :: :ok | {:error, :file.posix() | :badarg | :terminated}
  defdelegate datasync(io_device), to: :dtrace_file
  @doc "As `:file.truncate/1`; fires TRUNCATE (14)."
  @spec truncate(:file.io_device()) :: :ok | {:error, :file.posix() | :badarg | :terminated}
  defdelegate truncate(io_device), to: :dtrace_file
  @doc "As `:file.advise/4`; fires FADVISE (31) with offset, length and advice."
  @spec advise(:file.io_device(), integer(), integer(), :normal | :sequential | :random | :no_reuse | :will_need | :dont_need) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate advise(io_device, offset, length, advise), to: :dtrace_file
  @doc "As `:file.read_file/1`; fires READ_FILE (15) with the path."
  @spec read_file(:file.name_all()) :: {:ok, binary()} | {:error, term()}
  defdelegate read_file(filename), to: :dtrace_file
  @doc "As `:file.write_file/2`; fires OPEN, WRITE and CLOSE, as OTP's driver did."
  @spec write_file(:file.name_all(), iodata()) :: :ok | {:error, :file.posix() | :badarg | :terminated | :system_limit}
  defdelegate write_file(filename, bytes), to: :dtrace_file
  @doc "As `:file.write_file/3`; fires OPEN, WRITE and CLOSE."
  @spec write_file(:file.name_all(), iodata(), [:file.mode()]) :: :ok | {:error, :file.posix() | :badarg | :terminated | :system_limit}
  defdelegate write_file(filename, bytes, modes), to: :dtrace_file
  @doc "As `:file.read_file_info/1`; fires FSTAT (5) with the path or descriptor."
  @spec read_file_info(:file.name_all() | :file.io_device()) :: {:ok, :file.file_info()} | {:error, :file.posix() | :badarg}
  defdelegate read_file_info(file), to: :dtrace_file
  @doc "As `:file.read_file_info/2`; fires FSTAT (5)."
  @spec read_file_info(:file.name_all() | :file.io_device(), list()) :: {:ok, :file.file_info()} | {:error, :file.posix() | :badarg}
  defdelegate read_file_info(file, opts), to: :dtrace_file
  @doc "As `:file.read_link_info/1`; fires LSTAT (19) with the path."
  @spec read_link_info(:file.name_all()) :: {:ok, :file.file_info()} | {:error, :file.posix() | :badarg}
  defdelegate read_link_info(name), to: :dtrace_file
  @doc "As `:file.read_link_info/2`; fires LSTAT (19)."
  @spec read_link_info(:file.name_all(), list()) :: {:ok, :file.file_info()} | {:error, :file.posix() | :badarg}
  defdelegate read_link_info(name, opts), to: :dtrace_file
  @doc "As `:file.write_file_info/2`; fires WRITE_INFO (16) with mode, uid and gid."
  @spec write_file_info(:file.name_all(), :file.file_info()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate write_file_info(filename, info), to: :dtrace_file
  @doc "As `:file.write_file_info/3`; fires WRITE_INFO (16)."
  @spec write_file_info(:file.name_all(), :file.file_info(), list()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate write_file_info(filename, info, opts), to: :dtrace_file
  @doc "As `:file.rename/2`; fires RENAME (12) with both paths."
  @spec rename(:file.name_all(), :file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate rename(source, destination), to: :dtrace_file
  @doc "As `:file.delete/1`; fires DELETE (11) with the path."
  @spec delete(:file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate delete(filename), to: :dtrace_file
  @doc "As `:file.delete/2`; fires DELETE (11)."
  @spec delete(:file.name_all(), list()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate delete(filename, opts), to: :dtrace_file
  @doc "As `:file.make_dir/1`; fires MKDIR (10) with the path."
  @spec make_dir(:file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate make_dir(dir), to: :dtrace_file
  @doc "As `:file.del_dir/1`; fires RMDIR (13) with the path."
  @spec del_dir(:file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate del_dir(dir), to: :dtrace_file
  @doc "As `:file.list_dir/1`; fires READDIR (7) with the path."
  @spec list_dir(:file.name_all()) :: {:ok, [:file.filename()]} | {:error, term()}
  defdelegate list_dir(dir), to: :dtrace_file
  @doc "As `:file.list_dir_all/1`; fires READDIR (7)."
  @spec list_dir_all(:file.name_all()) :: {:ok, [:file.filename_all()]} | {:error, term()}
  defdelegate list_dir_all(dir), to: :dtrace_file
  @doc "As `:file.read_link/1`; fires READLINK (20) with the path."
  @spec read_link(:file.name_all()) :: {:ok, :file.filename()} | {:error, term()}
  defdelegate read_link(name), to: :dtrace_file
  @doc "As `:file.read_link_all/1`; fires READLINK (20)."
  @spec read_link_all(:file.name_all()) :: {:ok, :file.filename_all()} | {:error, term()}
  defdelegate read_link_all(name), to: :dtrace_file
  @doc "As `:file.make_link/2`; fires LINK (21) with both paths."
  @spec make_link(:file.name_all(), :file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate make_link(existing, new), to: :dtrace_file
  @doc "As `:file.make_symlink/2`; fires SYMLINK (22) with both paths."
  @spec make_symlink(:file.name_all(), :file.name_all()) :: :ok | {:error, :file.posix() | :badarg}
  defdelegate make_symlink(existing, new), to: :dtrace_file
  @doc "As `:file.get_cwd/0`; fires PWD (6)."
  @spec get_cwd() :: {:ok, :file.filename()} | {:error, :file.posix()}
  defdelegate get_cwd(), to: :dtrace_file
  @doc "As `:file.set_cwd/1`; fires CHDIR (8) with the path."
  @spec set_cwd(:file.name() | binary()) :: :ok | {:error, term()}
  defdelegate set_cwd(dir), to: :dtrace_file
end
