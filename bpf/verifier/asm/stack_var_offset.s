# expect: reject var-stack-offset
# env: xdp
# kernel: skip privileged kernel allows variable-offset stack access
call 7
and %r0, 8
mov %r2, %r10
sub %r2, 16
add %r2, %r0
stdw [%r2+0], 0
mov %r0, 0
exit
