# expect: reject return-value
# env: xdp
exit
