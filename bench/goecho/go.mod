module dra-bridge.io/bench/goecho

go 1.24
