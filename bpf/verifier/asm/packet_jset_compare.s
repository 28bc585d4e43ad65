# expect: reject pointer-compare
# env: xdp
# kernel: skip the privileged kernel allows bit tests between packet pointers
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r0, 0
jset %r2, %r3, out
mov %r0, 1
out:
exit
