"""Paper reproductions (Deng et al., Sec. 7) as functions returning data and figures."""
