/*
 * Baseline for benchmarks only: the published float32 model-1 kernel of the seed paper
 * (appendix "Example OpenCL kernel", HPHawkes.jl), transcribed so that it can be timed in the
 * same run as ours. The helpers pdf / cdf / exppdf_2sq are not printed in the paper; they are
 * written here as the standard normal density and distribution and exp(-a) * pdf(sqrt(b)),
 * which gives the relation of DESIGN section 2: the result equals our ell with
 * rho = tauXprec^2 / sqrt(2 pi) plus (N/2) log(2 pi). One work-group of 256 per row.
 */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define M_1_SQRT_2PI_F 0.3989422804014327f

static float pdf(float x) { return M_1_SQRT_2PI_F * exp(-0.5f * x * x); }
static float cdf(float x) { return 0.5f * erfc(-x * M_SQRT1_2_F); }
static float exppdf_2sq(float a, float b) { return M_1_SQRT_2PI_F * exp(-a - 0.5f * b); }

__kernel void computeLikContribsModel1(__global const float2 *locations,
                                       __global const float *times,
                                       __global float *likContribs,
                                       const float sigmaXprec, const float tauXprec,
                                       const float tauTprec, const float omega,
                                       const float theta, const float mu0, const int dimX,
                                       const uint locationStart, const uint locationEnd,
                                       const uint locationCount)
{
    const uint i = locationStart + get_group_id(0);
    const uint gid = get_group_id(0);
    const uint lid = get_local_id(0);
    uint j = get_local_id(0);
    __local float scratch[256];
    __local float scratch2[256];
    const float2 vectorI = locations[i];
    const float timeI = times[i];
    float sum = 0.0f;
    float mu0TauXprecDTauTprec = mu0 * pow(tauXprec, dimX) * tauTprec;
    float thetaSigmaXprecDOmega = theta * pow(sigmaXprec, dimX) * omega;
    while (j < locationCount) {
        const float timDiff = timeI - times[j];
        const float2 vectorJ = locations[j];
        const float2 difference = vectorI - vectorJ;
        const float distancesq = dot(difference.lo, difference.lo) +
                                 dot(difference.hi, difference.hi);
        const float innerContrib =
            mu0TauXprecDTauTprec * ((timDiff != 0) ? pdf(timDiff * tauTprec) : 0.0f) +
            thetaSigmaXprecDOmega *
                ((timDiff > 0) ? exppdf_2sq(omega * timDiff,
                                            distancesq * sigmaXprec * sigmaXprec) : 0.0f);
        sum += innerContrib;
        j += 256;
    }
    scratch[lid] = sum;
    scratch2[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 1; k < 256; k <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        uint mask = (k << 1) - 1;
        if ((lid & mask) == 0) {
            if (scratch2[lid] < scratch2[lid + k])
                scratch2[lid] = scratch2[lid + k];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float maximum = max(scratch2[0], (float)1e-40);
    scratch[lid] = scratch[lid] / maximum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 1; k < 256; k <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        uint mask = (k << 1) - 1;
        if ((lid & mask) == 0) {
            scratch[lid] += scratch[lid + k];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[0] = max(scratch[0], (float)1e-40);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        likContribs[gid] = log(maximum) + log(scratch[0]) +
            theta * (exp(-omega * (times[locationCount - 1] - times[i])) - 1) -
            mu0 * (cdf((times[locationCount - 1] - times[i]) * tauTprec) -
                   cdf(-times[i] * tauTprec));
    }
}
