// rv_f64.wgsl - f64 values to and from their IEEE 754 bits (a u64 as vec2<u32>), for behaviours that compute in
// f64 (sensor). Part of the program only on an adapter with shader f64 (wgpu's SHADER_F64); naga's bitcast does
// not convert between f64 and two u32 words, so the bits are taken apart and put together here. Subnormals read
// and are written as zero; a NaN or an infinity is what f64_finite refuses before any arithmetic.

// Whether the bits are a finite number (not a NaN, not an infinity).
fn f64_finite(v: vec2<u32>) -> bool { return ((v.y >> 20u) & 0x7FFu) != 0x7FFu; }

fn f64_from_bits(v: vec2<u32>) -> f64 {
    let e = (v.y >> 20u) & 0x7FFu;
    let sign = select(1.0lf, -1.0lf, (v.y >> 31u) != 0u);
    if (e == 0u) { return sign * 0.0lf; }
    let m = f64((v.y & 0xFFFFFu) | 0x100000u) * 4294967296.0lf + f64(v.x); // the 53-bit significand
    return sign * ldexp(m, i32(e) - 1075);
}

fn f64_bits(x: f64) -> vec2<u32> {
    if (x == 0.0lf) { return vec2<u32>(0u, 0u); }
    var sign = 0u;
    var a = x;
    if (x < 0.0lf) {
        sign = 0x80000000u;
        a = -x;
    }
    // The binary exponent: the largest e with 2^e <= a (a binary search; naga's f64 frexp needs 64-bit integers).
    var below = -1075;
    var above = 1024;
    loop {
        if (above - below <= 1) { break; }
        let mid = below + (above - below) / 2;
        if (a >= ldexp(1.0lf, mid)) { below = mid; } else { above = mid; }
    }
    let e = below + 1023;
    if (e <= 0) { return vec2<u32>(0u, sign); }
    if (e >= 2047) { return vec2<u32>(0u, sign | 0x7FF00000u); }
    let m = ldexp(a, 52 - below); // an integer in [2^52, 2^53)
    let hi = floor(m / 4294967296.0lf);
    let lo = m - hi * 4294967296.0lf;
    return vec2<u32>(u32(lo), sign | (u32(e) << 20u) | (u32(hi) & 0xFFFFFu));
}

// A u64 as f64 (exact below 2^53).
fn f64_of_u64(v: vec2<u32>) -> f64 { return f64(v.y) * 4294967296.0lf + f64(v.x); }

// The f64 in the state at byte `at`, and storing one.
fn rv_state_f64(at: u32) -> f64 { return f64_from_bits(rv_state_u64(at)); }
fn rv_state_set_f64(at: u32, x: f64) { rv_state_set_u64(at, f64_bits(x)); }
