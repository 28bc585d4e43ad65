# expect: reject pointer-compare
# env: xdp
# kernel: skip privileged kernel allows pointer comparisons
mov %r0, 0
jgt %r10, %r1, out
mov %r0, 1
out:
exit
