// protocol/entry.wgsl - the entry points: block 0's dispatch, the scan for slots with work, the step of each such slot.
//
// Part of the WGSL port of the device protocol (read wgsl/rv_protocol.wgsl for the differences WebGPU forces);
// the twin of kernels/rv_entry.cu and kernels/cuda/rv_kernel.cu, whose dispatch model differs (one persistent
// kernel there, three dispatches per round here): not compared by device/tests/protocol_mirror.rs.

// ---- entry points ------------------------------------------------------------------------------------------------
// Block 0: one workgroup of one invocation, in a dispatch of its own.
@compute @workgroup_size(1)
fn rv_keeper_main() {
    rv_view_load();
    // A fresh work list for the actor dispatches that follow (an empty grid is x = 0).
    atomicStore(&W[0], 0u);
    atomicStore(&A[0], 0u);
    atomicStore(&A[1], 1u);
    atomicStore(&A[2], 1u);
    g_parity = (atomicAdd(&R[0], 1u) + 1u) & 1u;
    atomicOr(&R[1], rv_keeper_step());
}

// The actors, in two dispatches. The scan: workgroup g checks slots [g * slots_per_group, (g + 1) *
// slots_per_group) and lists those that are not idle in W (W[0]: how many, W[1..]: the slots), growing the
// indirect dispatch arguments A (x, y, z) to cover them. The step: one workgroup per listed slot.
// Why two: a shader compiler that runs divergent branches with an execution mask (lavapipe does) pays for the
// whole step in every loop iteration that contains it, taken or not; the scan holds only the idle check, and the
// step runs once per slot with work.
@compute @workgroup_size(1)
fn rv_actor_scan_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    rv_view_load();
    let group = wg.x + wg.y * groups.x;
    let first = group * U.slots_per_group;
    let last = min(first + U.slots_per_group, g_slots);
    for (var slot = first; slot < last; slot = slot + 1u) {
        if (rv_slot_idle(slot)) { continue; }
        let i = atomicAdd(&W[0], 1u);
        atomicStore(&W[1u + i], slot);
        atomicMax(&A[0], min(i + 1u, U.max_groups_x));
        atomicMax(&A[1], i / U.max_groups_x + 1u);
    }
}

@compute @workgroup_size(1)
fn rv_actor_step_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    rv_view_load();
    g_parity = atomicLoad(&R[0]) & 1u;
    let i = wg.x + wg.y * groups.x;
    if (i >= atomicLoad(&W[0])) { return; }
    let slot = atomicLoad(&W[1u + i]);
    let r = rv_actor_step(slot, U.budget);
    if ((r & RV_STEP_REPLIED) != 0u) { atomicOr(&R[2u + (slot >> 5u)], 1u << (slot & 31u)); }
    if (r != 0u) { atomicOr(&R[1], r); }
}

// The envelope's own payload (at most RV_PAYLOAD_BYTES; a large message's is its bulk reference): its length
