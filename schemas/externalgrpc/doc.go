// Package externalgrpc is the cluster-autoscaler's externalgrpc cloud
// provider API, generated from externalgrpc.proto: the gRPC service
// (CloudProvider) the upstream cluster-autoscaler calls when it runs with
// --cloud-provider=externalgrpc, and capn's autoscaler-provider serves.
//
// externalgrpc.proto is upstream's file, byte for byte (Apache License
// 2.0, its header kept): kubernetes/autoscaler at UpstreamCommit (release
// cluster-autoscaler-1.36.1, the commit the Makefile builds),
// cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto.
// Only its Go package is given by capn (schemas/buf.gen.yaml); buf lint
// ignores it, since its names are the wire's. To update it: copy the file
// of the commit AUTOSCALER_COMMIT names, set UpstreamCommit and
// UpstreamSHA256, and run make proto.
package externalgrpc

// UpstreamCommit is the kubernetes/autoscaler commit externalgrpc.proto
// was copied from.
const UpstreamCommit = "35e8a280425c76a4040f57ae0fa232a952c02024"

// UpstreamSHA256 is the SHA-256 of externalgrpc.proto at UpstreamCommit.
const UpstreamSHA256 = "0897df2cde8058f9412bb3484105fa9dadcdb8874afde6c6a7116e598c2f5fc2"
