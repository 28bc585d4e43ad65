# expect: accept
# env: socket_filter
# A callee fills the caller's spilled scalar through a pointer, compares it and may overwrite
# the slot: ids reach across frames and a store ends the copy (embedding and kernel agree).
ldxw %r6, [%r1+0]
stxdw [%r10-8], %r6
mov %r1, %r10
add %r1, -8
call local sub
jgt %r6, 10, out
ldxdw %r0, [%r10-8]
exit
out:
mov %r0, 0
exit
sub:
ldxdw %r2, [%r1+0]
jgt %r2, 5, big
stdw [%r1+0], 77
big:
mov %r0, 0
exit
