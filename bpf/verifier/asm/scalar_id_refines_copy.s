# expect: accept
# env: xdp
# map: table array 4 16 1
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
call 7
mov %r7, %r0
stw [%r10-4], 0
mov %r6, %r7
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
jgt %r7, 15, out
add %r0, %r6
ldxb %r0, [%r0+0]
exit
out:
mov %r0, 0
exit
