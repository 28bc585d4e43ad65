# expect: reject uninit-stack
# env: socket_filter
# kernel: skip the kernel marks all `umax` bytes of a helper's write as initialised
# skb_load_bytes writes `len` bytes, `len` in [1, 8], into an uninitialised slot: the bytes
# past `len` are whatever the host stack held there, not initialised data.
ldxw %r4, [%r1+0]
and %r4, 7
add %r4, 1
mov %r2, 0
mov %r3, %r10
add %r3, -8
call 26
ldxdw %r0, [%r10-8]
exit
