%% @generated from native/dtrace_nif/probes.d by `make generated`: do not edit.
%% OTP's efile command numbers (efile_drv.c, OTP 20), the `command'
%% argument of the efile_drv__* probes.
-define(OPEN, 1).
-define(READ, 2).
-define(LSEEK, 3).
-define(WRITE, 4).
-define(FSTAT, 5).
-define(PWD, 6).
-define(READDIR, 7).
-define(CHDIR, 8).
-define(FSYNC, 9).
-define(MKDIR, 10).
-define(DELETE, 11).
-define(RENAME, 12).
-define(RMDIR, 13).
-define(TRUNCATE, 14).
-define(READ_FILE, 15).
-define(WRITE_INFO, 16).
-define(LSTAT, 19).
-define(READLINK, 20).
-define(LINK, 21).
-define(SYMLINK, 22).
-define(CLOSE, 23).
-define(PWRITEV, 24).
-define(PREADV, 25).
-define(READ_LINE, 29).
-define(FDATASYNC, 30).
-define(FADVISE, 31).
