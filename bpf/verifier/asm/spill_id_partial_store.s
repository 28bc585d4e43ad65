# expect: reject out-of-bounds
# env: socket_filter
# map: t array 4 16 1
# A one-byte store into the slot of a spilled scalar ends the copy: the bound learnt on the
# register must not reach the slot.
ldxw %r6, [%r1+0]
stxdw [%r10-8], %r6
stb [%r10-8], 100
jgt %r6, 7, out
stw [%r10-16], 0
lddw %r1, map:t
mov %r2, %r10
add %r2, -16
call 1
jeq %r0, 0, out
ldxdw %r7, [%r10-8]
add %r0, %r7
ldxb %r0, [%r0+0]
exit
out:
mov %r0, 0
exit
