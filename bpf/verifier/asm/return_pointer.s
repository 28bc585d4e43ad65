# expect: reject pointer-leak
# env: xdp
# kernel: skip privileged kernel allows returning pointers
mov %r0, %r10
exit
