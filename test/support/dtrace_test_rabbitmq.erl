%%% What the suites that start Debian's RabbitMQ share
%%% (dtrace_rabbitmq_SUITE, dtrace_kit_SUITE): the broker's home with a
%%% fresh cookie, and free ports on 127.0.0.1.
-module(dtrace_test_rabbitmq).

-export([home/1, free_ports/1]).

%% Base/home with a random cookie in .erlang.cookie (mode 0400, as
%% RabbitMQ wants it): {Home, CookieFile, the cookie as a string}.
home(Base) ->
    Home = filename:join(Base, "home"),
    Cookie = filename:join(Home, ".erlang.cookie"),
    ok = filelib:ensure_path(Home),
    Text = binary_to_list(binary:encode_hex(crypto:strong_rand_bytes(16))),
    ok = file:write_file(Cookie, Text),
    ok = file:change_mode(Cookie, 8#400),
    {Home, Cookie, Text}.

%% N TCP ports free on 127.0.0.1 now, as strings.
free_ports(N) ->
    Socks = [begin {ok, S} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]), S end || _ <- lists:seq(1, N)],
    Ports = [begin {ok, P} = inet:port(S), integer_to_list(P) end || S <- Socks],
    [gen_tcp:close(S) || S <- Socks],
    Ports.
