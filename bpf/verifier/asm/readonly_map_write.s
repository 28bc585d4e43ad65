# expect: reject read-only
# env: xdp
# map: consts array 4 8 1 ro
# kernel: skip read-only maps need BPF_F_RDONLY_PROG at map creation
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:consts
call 1
jeq %r0, 0, out
stdw [%r0+0], 1
out:
mov %r0, 2
exit
