# expect: reject uninit-stack
# env: socket_filter
# kernel: skip the privileged kernel (allow_ptr_leaks) lets root read the rest of the slot
# skb_load_bytes writes one byte of the slot holding the spilled context pointer; the
# other seven bytes are still the host address and must not become readable.
stxdw [%r10-8], %r1
mov %r2, 0
mov %r3, %r10
add %r3, -8
mov %r4, 1
call 26
ldxw %r0, [%r10-4]
exit
