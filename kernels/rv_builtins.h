/*
 * rv_builtins.h - the built-in behaviours: the one list every table of them is made from or checked against.
 *
 * RV_BUILTINS(X) calls X(id, name) once per built-in, in id order. A built-in `name` is the function
 * rv_behaviour_<name>, in behaviours/<name>.cu (included by builtins.cu) and wgsl/behaviours/<name>.wgsl. The
 * host's table (host/rv_host.cpp) is generated from this list; the Rust tables (BUILTIN_BEHAVIOURS,
 * KERNEL_FILES, WGSL_BEHAVIOURS) and builtins.cu are checked against it (device/src/backend/mod.rs tests).
 * User behaviours take ids from RV_FIRST_USER_BEHAVIOUR (rv_behaviour.h) on.
 */
#ifndef RV_BUILTINS_H
#define RV_BUILTINS_H

#define RV_BUILTINS(X) \
    X(1, echo)         \
    X(2, counter)      \
    X(3, kv)           \
    X(4, test)         \
    X(5, sensor)       \
    X(6, alerts)

#endif /* RV_BUILTINS_H */
