%%% The deadlines of dtrace_floors and its companions (dtrace_floors_build,
%%% dtrace_floors_programs), in ms.
-define(CC_TIMEOUT, 120000).
-define(RUN_TIMEOUT, 120000).
-define(ATTACH_TIMEOUT, 60000).
