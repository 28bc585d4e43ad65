# expect: reject uninit-register
# env: xdp
mov %r0, %r5
exit
