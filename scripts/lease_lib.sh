# Shared steps of the GPU lease scripts (sourced by scripts/gpu_lease_512.sh and scripts/gpu_lease_arms.sh).

# lease_node_check PY LEASE: what the node is (GPU, torch and CUDA), and the carried warm start, or exit 2
lease_node_check() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    "$1" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
    [ -f "$2/init-fp16/manifest.json" ] || { echo "no warm start at $2/init-fp16: carry it" >&2; exit 2; }
}

# lease_link_shards LEASE PREFIX DEST: every carried shard of LEASE/PREFIX-*/ linked into the empty folder DEST
lease_link_shards() {
    rm -rf "$3"; mkdir -p "$3"
    for f in "$1/$2"-*/*.npz; do [ -e "$f" ] && ln -sf "$(realpath "$f")" "$3/"; done
}
