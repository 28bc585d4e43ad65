# expect: reject out-of-bounds
# env: socket_filter
# map: t array 4 16 1
# A filled copy changed by 32-bit ALU is no copy any more: the bound learnt on the spilled
# register must not reach it (nor the slot it is stored to).
ldxw %r6, [%r1+0]
stxdw [%r10-8], %r6
ldxdw %r8, [%r10-8]
add32 %r8, 100
stxdw [%r10-24], %r8
jgt %r6, 7, out
stw [%r10-16], 0
lddw %r1, map:t
mov %r2, %r10
add %r2, -16
call 1
jeq %r0, 0, out
ldxdw %r7, [%r10-24]
add %r0, %r7
ldxb %r0, [%r0+0]
exit
out:
mov %r0, 0
exit
