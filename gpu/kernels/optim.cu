// optim.cu: the fused optimizer steps over contiguous float32 or float64
// tensors; the CPU reference is engine/cpu/optim.go (float64) and
// engine/cpu/vmath/optim.go (float32). The CPU refuses other parameter
// types (keep float32 master weights), and so does the Go side here.
//
// The float32 steps take their scalars already rounded to float32 from the
// float64 hyper-parameters, computed on the host exactly as vmath's
// newAdamConsts / SGDStep do, and round at the same steps as vmath's
// adamElem / sgdGo: ze_* are never contracted, fmaf is vmath's fma32.

enum { ADAM_DECOUPLED = 1, ADAM_L2 = 2, ADAM_AMSGRAD = 4 };
enum { SGD_L2 = 1, SGD_MOMENTUM = 2, SGD_FIRST = 4, SGD_NESTEROV = 8 };

// adam_f32: per element (vmath.adamElem)
//
//	g = g·gsign;  AdamW: p = p·decay;  Adam with weight decay: g = fma(p, wd, g)
//	m = fma(g, c1, m·beta1)
//	v = (v·beta2) + ((c2·g)·g)
//	AMSGrad: vmax = max(vmax, v) (NaN in v wins), v̂ = vmax
//	p = p + (negStep·m) / ((√v̂ / bc2Sqrt) + eps)
//
// vmax is null without AMSGrad.
extern "C" __global__ __launch_bounds__(256) void adam_f32(float* p, const float* g, float* m, float* v, float* vmax, i64 n, float gsign,
                                    float decay, float wd, float beta1, float c1, float beta2, float c2, float neg_step,
                                    float bc2_sqrt, float eps, int mode) {
    ZE_GRID_LOOP(i, n) {
        float pi = p[i], gi = ze_mul(g[i], gsign), mi = m[i], vi = v[i];
        if (mode & ADAM_DECOUPLED)
            pi = ze_mul(pi, decay);
        else if (mode & ADAM_L2)
            gi = fmaf(pi, wd, gi);
        mi = fmaf(gi, c1, ze_mul(mi, beta1));
        vi = ze_add(ze_mul(vi, beta2), ze_mul(ze_mul(c2, gi), gi));
        float vd = vi;
        if (mode & ADAM_AMSGRAD) {
            float vm = vmax[i];
            if (!(vm >= vi)) vm = vi;
            vmax[i] = vm;
            vd = vm;
        }
        const float denom = ze_add(ze_div(ze_sqrt(vd), bc2_sqrt), eps);
        p[i] = ze_add(pi, ze_div(ze_mul(neg_step, mi), denom));
        m[i] = mi;
        v[i] = vi;
    }
}

// adam_f64: cpu.adam64, the same steps in float64 without fusion (decay =
// 1 − lr·wd, c1 = 1 − beta1, c2 = 1 − beta2, negStep = −lr/bc1 from the
// host).
extern "C" __global__ __launch_bounds__(256) void adam_f64(double* p, const double* g, double* m, double* v, double* vmax, i64 n, double gsign,
                                    double decay, double wd, double beta1, double c1, double beta2, double c2,
                                    double neg_step, double bc2_sqrt, double eps, int mode) {
    ZE_GRID_LOOP(i, n) {
        double pi = p[i], gi = ze_mul(g[i], gsign), mi = m[i], vi = v[i];
        if (mode & ADAM_DECOUPLED)
            pi = ze_mul(pi, decay);
        else if (mode & ADAM_L2)
            gi = ze_add(gi, ze_mul(wd, pi));
        mi = ze_add(ze_mul(mi, beta1), ze_mul(c1, gi));
        vi = ze_add(ze_mul(vi, beta2), ze_mul(ze_mul(c2, gi), gi));
        double vd = vi;
        if (mode & ADAM_AMSGRAD) {
            double vm = vmax[i];
            if (!(vm >= vi)) vm = vi;
            vmax[i] = vm;
            vd = vm;
        }
        const double denom = ze_add(ze_div(ze_sqrt(vd), bc2_sqrt), eps);
        p[i] = ze_add(pi, ze_div(ze_mul(neg_step, mi), denom));
        m[i] = mi;
        v[i] = vi;
    }
}

// sgd_f32: per element (vmath.sgdGo)
//
//	d = g·gsign;  with weight decay: d = fma(p, wd, d)
//	with momentum: b = first ? d : fma(d, damp, buf·mom); buf = b
//	               d = nesterov ? fma(b, mom, d) : b
//	p = fma(d, negLR, p)
//
// damp is 1 − dampening; buf is null without momentum.
extern "C" __global__ __launch_bounds__(256) void sgd_f32(float* p, const float* g, float* buf, i64 n, float gsign, float wd, float mom,
                                   float damp, float neg_lr, int mode) {
    ZE_GRID_LOOP(i, n) {
        const float pi = p[i];
        float d = ze_mul(g[i], gsign);
        if (mode & SGD_L2) d = fmaf(pi, wd, d);
        if (mode & SGD_MOMENTUM) {
            const float b = (mode & SGD_FIRST) ? d : fmaf(d, damp, ze_mul(buf[i], mom));
            buf[i] = b;
            d = (mode & SGD_NESTEROV) ? fmaf(b, mom, d) : b;
        }
        p[i] = fmaf(d, neg_lr, pi);
    }
}

// sgd_f64: cpu.sgd64 without fusion:
//
//	d = g·gsign;  d = d + wd·p;  b = first ? d : buf·mom + damp·d
//	d = nesterov ? d + mom·b : b;  p = p − lr·d
extern "C" __global__ __launch_bounds__(256) void sgd_f64(double* p, const double* g, double* buf, i64 n, double gsign, double wd, double mom,
                                   double damp, double lr, int mode) {
    ZE_GRID_LOOP(i, n) {
        const double pi = p[i];
        double d = ze_mul(g[i], gsign);
        if (mode & SGD_L2) d = ze_add(d, ze_mul(wd, pi));
        if (mode & SGD_MOMENTUM) {
            const double b = (mode & SGD_FIRST) ? d : ze_add(ze_mul(buf[i], mom), ze_mul(damp, d));
            buf[i] = b;
            d = (mode & SGD_NESTEROV) ? ze_add(d, ze_mul(mom, b)) : b;
        }
        p[i] = ze_sub(pi, ze_mul(lr, d));
    }
}
