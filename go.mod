module github.com/emunic/emunic

go 1.26.8

require (
	github.com/google/gopacket v1.1.19
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/google/uuid v1.6.0
	github.com/hanwen/go-fuse/v2 v2.12.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237
)

require (
	github.com/google/btree v1.1.2 // indirect
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace gvisor.dev/gvisor => ./third_party/gvisor
