// rv_protocol.wgsl - the device protocol in WGSL: block 0's step (the keeper) and the actors' step, ported from
// kernels/rv_protocol.cu (the reference: same state machine, same validation, same events; read the comments
// there for the why of each step). Differences, all forced by WebGPU:
//   - regions are arrays of atomic words addressed by byte offsets (rv_port.wgsl); the offsets of the areas are
//     read from the grid header into private variables once per invocation (rv_view_load);
//   - behaviours see the current message as a private copy (m_env) and the reply is staged in a private copy
//     (c_reply): WGSL has no pointers into arbitrary memory;
//   - kernel-to-kernel cells carry the parity of the dispatch that published them in bit 31 of their sequence
//     number (positions are compared in 31 bits), and a consumer takes a cell only if it was published in an
//     earlier dispatch: the dispatch boundary is the only fence between workgroups (rv_k2k_ready);
//   - block 0 and the actors run in separate dispatches, so block 0 never races an actor step.
//
// The port is in five parts, concatenated in this order by device/src/backend/wgpu/program.rs: protocol/view.wgsl,
// protocol/api.wgsl, protocol/actor.wgsl, protocol/block0.wgsl, protocol/entry.wgsl.
