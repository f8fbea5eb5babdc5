# shellcheck shell=bash
# A throwaway PKI for the loopback control plane, made with Debian's openssl (nothing
# downloaded): one CA, serving certificates for 127.0.0.1 only, client certificates and the
# service-account signing key pair. ECDSA P-256 everywhere (fast to make; Go and rustls accept it).
# Source after common.sh.

# it_pki_ca DIR: DIR/ca.crt and DIR/ca.key, valid for two days.
it_pki_ca() {
    local dir=$1
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" -subj "/CN=numa-shim-it-ca" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# it_pki_cert DIR NAME SUBJECT USAGE [SAN]: DIR/NAME.crt and DIR/NAME.key signed by DIR/ca.*.
# USAGE is serverAuth, clientAuth or both ("serverAuth,clientAuth"); SAN e.g. "IP:127.0.0.1".
it_pki_cert() {
    local dir=$1 name=$2 subject=$3 usage=$4 san=${5:-}
    local ext=$dir/$name.ext
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [[ -n $san ]] && echo "subjectAltName=$san"
    } >"$ext"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "$subject" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 1 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
    rm -f "$dir/$name.csr" "$ext"
}

# it_pki_all DIR NODE: everything the control plane needs, for node NODE.
it_pki_all() {
    local dir=$1 node=$2
    local loopback="IP:127.0.0.1,DNS:localhost"
    it_pki_ca "$dir"
    # etcd's JSON gateway dials etcd itself with this certificate: it is a client too.
    it_pki_cert "$dir" etcd-server "/CN=etcd-server" serverAuth,clientAuth "$loopback"
    it_pki_cert "$dir" apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
    it_pki_cert "$dir" apiserver "/CN=kube-apiserver" serverAuth \
        "$loopback,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    it_pki_cert "$dir" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    it_pki_cert "$dir" admin "/O=system:masters/CN=numa-shim-it-admin" clientAuth
    # The kubelet's identity as the Node authorizer and NodeRestriction know it.
    it_pki_cert "$dir" kubelet "/O=system:nodes/CN=system:node:$node" clientAuth
    it_pki_cert "$dir" controller-manager "/CN=system:kube-controller-manager" clientAuth
    it_pki_cert "$dir" scheduler "/CN=system:kube-scheduler" clientAuth
    # Service-account tokens: the API server signs with sa.key and verifies with sa.pub.
    openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$dir/sa.key"
    openssl ec -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
    chmod 600 "$dir"/*.key
}
