#!/usr/bin/env escript
%%! +S 1 -noshell
%% Vendored from ../shared/otp-oracle with one fix: a process is monitored before its init returns
%% (the original could report an exit late, as `noproc`, when the logger lagged), and one extension:
%% `fail_from=N` makes every start attempt from the Nth on fail.
%% OTP oracle: runs a supervision scenario on Erlang/OTP's own supervisor and prints a canonical trace.
%% Scenario format: see README.md beside this file.
-module(oracle).
-mode(compile).
-behaviour(gen_server).
-export([main/1, init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2, start_child_proc/2, start_sup/2]).

main([File]) ->
    {ok, Bin} = file:read_file(File),
    Lines = [L || L <- string:split(binary_to_list(Bin), "\n", all), not blank(L)],
    {Tree, Actions} = parse(Lines),
    logger:set_primary_config(level, none),
    ets:new(rv, [named_table, public, set]),
    Logger = spawn(fun() -> logger_loop() end),
    register(rv_logger, Logger),
    process_flag(trap_exit, true),
    {sup, TopId, _, _} = Tree,
    case start_sup(TopId, Tree) of
        {ok, _Pid} -> ok;
        Other -> log({sup_start_result, TopId, Other})
    end,
    settle(),
    lists:foreach(fun run/1, Actions),
    settle(),
    flush_logger(),
    halt(0).

blank(L) -> S = string:trim(L), S =:= "" orelse hd(S) =:= $#.

%% ---------- parsing ----------
parse(Lines) ->
    {TreeLines, ActionLines} = lists:splitwith(fun(L) -> W = hd(string:lexemes(L, " ")), W =:= "sup" orelse W =:= "child" end, Lines),
    [Root | _] = TreeLines,
    {Tree, []} = tree(indent(Root), TreeLines),
    {Tree, [string:lexemes(string:trim(L), " ") || L <- ActionLines]}.

indent(L) -> length(L) - length(string:trim(L, leading)).
kv(Words) -> maps:from_list([list_to_tuple(string:split(W, "=")) || W <- Words]).

tree(Ind, [L | Rest]) ->
    [Kind | Words] = string:lexemes(string:trim(L), " "),
    KV = kv(Words),
    Id = maps:get("id", KV),
    case Kind of
        "child" -> {{child, Id, KV}, Rest};
        "sup" ->
            {Kids, Rest2} = kids(Ind, Rest, []),
            {{sup, Id, KV, Kids}, Rest2}
    end.
kids(Ind, [L | _] = Ls, Acc) ->
    case indent(L) > Ind of
        true -> {K, Rest} = tree(indent(L), Ls), kids(Ind, Rest, [K | Acc]);
        false -> {lists:reverse(Acc), Ls}
    end;
kids(_Ind, [], Acc) -> {lists:reverse(Acc), []}.

restart(KV) -> list_to_atom(maps:get("restart", KV, "permanent")).
shutdown(KV, Default) ->
    case maps:get("shutdown", KV, Default) of
        "brutal_kill" -> brutal_kill; "infinity" -> infinity; N -> list_to_integer(N)
    end.
bool(KV, K) -> maps:get(K, KV, "false") =:= "true".

spec({child, Id, KV}) ->
    #{id => Id, start => {?MODULE, start_child_proc, [Id, KV]}, restart => restart(KV),
      shutdown => shutdown(KV, "5000"), type => worker, significant => bool(KV, "significant")};
spec({sup, Id, KV, _} = T) ->
    #{id => Id, start => {?MODULE, start_sup, [Id, T]}, restart => restart(KV),
      shutdown => shutdown(KV, "infinity"), type => supervisor, significant => bool(KV, "significant")}.

%% ---------- supervisors and children ----------
start_sup(Id, T) -> supervisor:start_link({local, list_to_atom("sup_" ++ Id)}, ?MODULE, {sup, T}).

start_child_proc(Id, KV) ->
    N = ets:update_counter(rv, {starts, Id}, 1, {{starts, Id}, 0}),
    Fails = [list_to_integer(X) || X <- string:lexemes(maps:get("fail_starts", KV, ""), ",")],
    FailFrom = list_to_integer(maps:get("fail_from", KV, "0")),
    case lists:member(N, Fails) orelse (FailFrom > 0 andalso N >= FailFrom) of
        true -> log({start_fail, Id}), {error, start_failed};
        false -> gen_server:start_link(?MODULE, {child, Id, bool(KV, "hang_on_shutdown")}, [])
    end.

init({sup, {sup, Id, KV, Kids}}) ->
    log({start, Id}), watch(Id),
    Flags = #{strategy => list_to_atom(maps:get("strategy", KV, "one_for_one")),
              intensity => list_to_integer(maps:get("intensity", KV, "1")),
              period => list_to_integer(maps:get("period", KV, "5")),
              auto_shutdown => list_to_atom(maps:get("auto_shutdown", KV, "never"))},
    {ok, {Flags, [spec(K) || K <- Kids]}};
init({child, Id, Hang}) ->
    process_flag(trap_exit, true),
    log({start, Id}), watch(Id),
    {ok, {Id, Hang}}.

%% The logger monitors a process before its init returns, so an exit is never reported late (as noproc).
watch(Id) -> rv_logger ! {watch, Id, self()}, receive watched -> ok after 5000 -> ok end.

handle_call(_, _, S) -> {reply, ok, S}.
handle_cast(_, S) -> {noreply, S}.
handle_info({crash, R}, S) -> {stop, R, S};
handle_info({'EXIT', _, R}, S) -> {stop, R, S};
handle_info(_, S) -> {noreply, S}.
terminate(_, {_, true}) -> timer:sleep(infinity);
terminate(_, _) -> ok.

%% ---------- actions ----------
run(["crash", Id, Reason]) ->
    case pid_of(Id) of
        undefined -> log({no_pid, Id});
        Pid -> case Reason of
                   "kill" -> exit(Pid, kill);
                   _ -> Pid ! {crash, reason(Reason)}
               end
    end, settle();
run(["storm", Id, N]) -> storm(Id, list_to_integer(N), undefined), settle();
run(["sleep", Ms]) -> timer:sleep(list_to_integer(Ms));
run(["terminate_child", Sup, Id]) -> result("terminate_child", Id, catch supervisor:terminate_child(sup(Sup), Id)), settle();
run(["restart_child", Sup, Id]) -> result("restart_child", Id, catch supervisor:restart_child(sup(Sup), Id)), settle();
run(["delete_child", Sup, Id]) -> result("delete_child", Id, catch supervisor:delete_child(sup(Sup), Id)), settle();
run(["start_child", Sup | Words]) ->
    KV = kv(Words), Id = maps:get("id", KV),
    result("start_child", Id, catch supervisor:start_child(sup(Sup), spec({child, Id, KV}))), settle();
run(["which", Sup]) ->
    case catch supervisor:which_children(sup(Sup)) of
        L when is_list(L) ->
            Items = lists:sort([{Id, status(P)} || {Id, P, _, _} <- L]),
            out("which ~s~s", [Sup, [io_lib:format(" ~s:~s", [I, S]) || {I, S} <- Items]]);
        _ -> out("which ~s noproc", [Sup])
    end;
run(["count", Sup]) ->
    case catch supervisor:count_children(sup(Sup)) of
        L when is_list(L) ->
            out("count ~s specs=~p active=~p supervisors=~p workers=~p",
                [Sup, proplists:get_value(specs, L), proplists:get_value(active, L),
                 proplists:get_value(supervisors, L), proplists:get_value(workers, L)]);
        _ -> out("count ~s noproc", [Sup])
    end;
run(["stop"]) ->
    [{_, Top} | _] = ets:lookup(rv, top), _ = Top,
    case whereis(list_to_atom("sup_" ++ top_id())) of
        undefined -> out("stop noproc", []);
        P -> unlink(P), exit(P, shutdown), wait_down(P)
    end, settle().

%% An unpaced crash storm: each new incarnation of Id is crashed (abnormal) as soon as it exists, N times, with
%% no settle between: the next crash waits only for the last one's process to be gone. Ends early when no new
%% incarnation comes within a second (the supervisor gave up).
storm(_, 0, _) -> ok;
storm(Id, N, Last) -> storm(Id, N, Last, erlang:monotonic_time(millisecond) + 1000).
storm(Id, N, Last, Until) ->
    case pid_of(Id) of
        P when is_pid(P), P =/= Last ->
            M = monitor(process, P),
            P ! {crash, abnormal},
            receive {'DOWN', M, _, _, _} -> ok after 5000 -> ok end,
            storm(Id, N - 1, P);
        _ ->
            case erlang:monotonic_time(millisecond) < Until of
                true -> timer:sleep(1), storm(Id, N, Last, Until);
                false -> ok
            end
    end.

top_id() -> [{top, T}] = ets:lookup(rv, top), T.
wait_down(P) -> M = monitor(process, P), receive {'DOWN', M, _, _, _} -> ok after 10000 -> out("stop timeout", []) end.
sup(Id) -> list_to_atom("sup_" ++ Id).
status(undefined) -> "undefined";
status(restarting) -> "restarting";
status({restarting, _}) -> "restarting";
status(P) when is_pid(P) -> "running".
reason("normal") -> normal;
reason("shutdown") -> shutdown;
reason("shutdown_tag") -> {shutdown, tag};
reason("abnormal") -> abnormal.

result(Op, Id, R) -> out("~s ~s -> ~s", [Op, Id, norm_result(R)]).
norm_result(ok) -> "ok";
norm_result({ok, undefined}) -> "ok_undefined";
norm_result({ok, _}) -> "ok";
norm_result({ok, _, _}) -> "ok";
norm_result({error, {already_started, _}}) -> "error:already_started";
norm_result({error, already_present}) -> "error:already_present";
norm_result({error, running}) -> "error:running";
norm_result({error, restarting}) -> "error:restarting";
norm_result({error, not_found}) -> "error:not_found";
norm_result({error, _}) -> "error:other";
norm_result({'EXIT', _}) -> "error:noproc".

pid_of(Id) -> case ets:lookup(rv, {pid, Id}) of [{_, P}] -> P; [] -> undefined end.

%% Wait until every registered supervisor has processed its queue (restart retries are casts to self).
settle() ->
    timer:sleep(20),
    [catch sys:get_state(P, 1000) || {{pid, _}, P} <- ets:tab2list(rv), is_pid(P), is_process_alive(P)],
    timer:sleep(20).

%% ---------- trace logger ----------
log(E) -> rv_logger ! {event, E}.
out(F, A) -> rv_logger ! {line, lists:flatten(io_lib:format(F, A))}.
flush_logger() -> rv_logger ! {flush, self()}, receive flushed -> ok after 5000 -> ok end.

logger_loop() ->
    receive
        {event, {start, Id}} -> emit("start ~s", [Id]);
        {event, {start_fail, Id}} -> emit("start_fail ~s", [Id]);
        {event, {no_pid, Id}} -> emit("no_pid ~s", [Id]);
        {event, {sup_start_result, Id, R}} -> emit("sup_start ~s ~p", [Id, R]);
        {watch, Id, Pid} ->
            case ets:lookup(rv, top) of [] -> ets:insert(rv, {top, Id}); _ -> ok end,
            ets:insert(rv, {{pid, Id}, Pid}), monitor(process, Pid), put(Pid, Id), Pid ! watched;
        {'DOWN', _, process, Pid, R} -> emit("stop ~s ~s", [get(Pid), down_reason(R)]);
        {line, L} -> io:format("~s~n", [L]);
        {flush, From} -> From ! flushed
    end,
    logger_loop().
emit(F, A) -> io:format(F ++ "~n", A).
down_reason(normal) -> "normal";
down_reason(shutdown) -> "shutdown";
down_reason({shutdown, _}) -> "shutdown_tag";
down_reason(killed) -> "killed";
down_reason(_) -> "abnormal".
