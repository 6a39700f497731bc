"""A verifier to audit: ``mdsd-ot audit my_sampler:verify --p 0.5,0.3,0.2,0 --q 0.1,0.2,0.3,0.4``.

``verify(p, q, drafts, rng) -> token`` must output a token distributed exactly as ``p``; this one is the
registry's RRS (SpecInfer), so the audit passes. Replace it with your own sampler.
"""

from mdsd_ot.audit import registry_verify

verify = registry_verify("rrs")
