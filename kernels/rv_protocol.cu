/*
 * rv_protocol.cu - the device protocol: block 0's step and the actors' step.
 *
 * Compiled by NVRTC (CUDA) and by the host C++ compiler (CPU backend). See docs/protocol.md for the state
 * machine and the layout table, and rv_layout.h for the shared structures.
 *
 * The protocol is in four parts, included below in order; the WGSL port (wgsl/protocol/) is split along the
 * same seams, and device/tests/protocol_mirror.rs keeps the two in step (same functions, same order, same calls).
 *
 * Ownership rules, which every function below keeps:
 *   - the host writes the host lines of the control block and the producer indices of the inbox and command
 *     ring, and the consumer indices of the outbox and event ring; nothing else;
 *   - block 0 (rv_keeper_step) writes the command ring head, the event ring, its private records, and a
 *     slot's lifecycle line only while that slot is not running (Dormant, Terminated, Failed, no request
 *     pending); it talks to a running actor through request/request_seq and waits for request_ack;
 *   - an actor (rv_actor_step) writes its lifecycle line, inbox head, outbox tail and request_ack.
 * Every value read from the host is validated before use.
 */
#ifndef RV_PROTOCOL_CU
#define RV_PROTOCOL_CU
#include "protocol/view.cu"
#include "protocol/api.cu"
#include "protocol/actor.cu"
#include "protocol/block0.cu"
#endif /* RV_PROTOCOL_CU */
