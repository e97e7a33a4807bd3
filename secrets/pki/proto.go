package pki

import (
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// FromProto is the Set a ClusterPKI record (or the bootstrapper's sealed
// answer to controlplane-hosted) holds; missing parts are zero.
func FromProto(p *capnv1.ClusterPKI) Set {
	kp := func(k *capnv1.KeyPairPEM) KeyPair {
		return KeyPair{CertPEM: []byte(k.GetCertPem()), KeyPEM: []byte(k.GetKeyPem())}
	}
	return Set{
		CA: kp(p.GetCa()), EtcdCA: kp(p.GetEtcdCa()), FrontProxyCA: kp(p.GetFrontProxyCa()),
		ServiceAccount: ServiceAccountKey{PublicPEM: []byte(p.GetServiceAccount().GetCertPem()), PrivatePEM: []byte(p.GetServiceAccount().GetKeyPem())},
	}
}

// ToProto is s as a ClusterPKI record (the service-account key pair's
// public half in cert_pem).
func ToProto(s Set) *capnv1.ClusterPKI {
	kp := func(k KeyPair) *capnv1.KeyPairPEM {
		return &capnv1.KeyPairPEM{CertPem: string(k.CertPEM), KeyPem: string(k.KeyPEM)}
	}
	return &capnv1.ClusterPKI{
		Ca: kp(s.CA), EtcdCa: kp(s.EtcdCA), FrontProxyCa: kp(s.FrontProxyCA),
		ServiceAccount: &capnv1.KeyPairPEM{CertPem: string(s.ServiceAccount.PublicPEM), KeyPem: string(s.ServiceAccount.PrivatePEM)},
	}
}
