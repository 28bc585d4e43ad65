# expect: reject uninit-stack
# env: socket_filter
# kernel: skip the kernel marks all `umax` bytes written, and root (allow_ptr_leaks) may read them
# skb_load_bytes writes `len` bytes, `len` in [1, 8], over the slot holding the spilled stack
# pointer. With len = 1 the other seven bytes are still the host address: only the first
# `umin` bytes are surely written, the rest of the slot must stay unreadable.
stxdw [%r10-8], %r10
ldxw %r4, [%r1+0]
and %r4, 7
add %r4, 1
mov %r2, 0
mov %r3, %r10
add %r3, -8
call 26
ldxdw %r0, [%r10-8]
rsh %r0, 8
exit
