# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel lets programs read uninitialised stack (rdx never does: it is host memory)
# map: counts hash 4 8 4
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
mov %r0, 0
exit
